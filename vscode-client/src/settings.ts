// The `cudaAgent.*` settings. Most belong to the server, which pulls them with workspace/configuration;
// the rest are the extension's own (how to reach the server) and never leave it. The LLM's API key is never a
// setting: it comes from VS Code's secret storage into what the server is sent (or from the server's
// environment).

export const SECTION = 'cudaAgent';

/** Top-level keys of the section that are the extension's, not the server's. */
const CLIENT_KEYS = new Set(['interpreter', 'server', 'token']);

/** Settings whose change needs a new server process or connection (the others the server re-reads). */
export const RESTART_SETTINGS = ['cudaAgent.interpreter', 'cudaAgent.server'];

/** LLM providers whose key can be kept in secret storage, and the variable the server reads otherwise. */
export const LLM_KEY_ENV: Readonly<Record<string, string>> = {
  anthropic: 'ANTHROPIC_API_KEY',
  'openai-compatible': 'CUDA_AGENT_LLM_API_KEY',
};

/** The provider setting's default: not sent, so that a server's own default (its environment) holds. */
export const SERVER_DEFAULT = 'default';

export interface ConfigurationReader {
  get<T>(key: string): T | undefined;
}

export interface ClientSettings {
  interpreter: string;
  serverAddress: string;
  serverToken: string;
  llmProvider: string; // read here only to know which stored key to send
}

export function readClientSettings(config: ConfigurationReader): ClientSettings {
  return {
    interpreter: config.get<string>('interpreter') ?? '',
    serverAddress: config.get<string>('server.address') ?? '',
    serverToken: config.get<string>('server.token') ?? '',
    llmProvider: config.get<string>('llm.provider') ?? SERVER_DEFAULT,
  };
}

/**
 * The section as the server should see it: its own keys only (the token and local paths stay here), and
 * under `llm` the key from secret storage, if one is kept; a key written into plain settings is dropped.
 */
export function serverSettings(section: unknown, llmApiKey?: string): Record<string, unknown> | null {
  if (!isObject(section)) {
    return null;
  }
  const settings: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(section)) {
    if (!CLIENT_KEYS.has(key) && typeof value !== 'function') {
      settings[key] = value;
    }
  }
  if (isObject(settings.llm) || llmApiKey) {
    const { apiKey: _plain, ...llm } = isObject(settings.llm) ? settings.llm : {};
    if (llm.provider === SERVER_DEFAULT) {
      delete llm.provider; // VS Code always reports the default: sent, it would override the server's own
    }
    settings.llm = llmApiKey ? { ...llm, apiKey: llmApiKey } : llm;
  }
  return settings;
}

/** initializationOptions: the server's settings (as for workspace/configuration) and the access token. */
export function initializationOptions(
  section: unknown,
  client: ClientSettings,
  environment: Readonly<Record<string, string | undefined>>,
  llmApiKey?: string,
): Record<string, unknown> {
  const options: Record<string, unknown> = { ...serverSettings(section, llmApiKey) };
  const token = client.serverToken || environment.CUDA_AGENT_TOKEN;
  if (token) {
    options.token = token;
  }
  return options;
}

/** The local server's environment: the extension host's own, passed through, so whatever the editor was
 * started with (CUDA_AGENT_*, an LLM key, a CUDA path) reaches the server. */
export function serverEnvironment(base: Readonly<Record<string, string | undefined>>): Record<string, string> {
  const environment: Record<string, string> = {};
  for (const [name, value] of Object.entries(base)) {
    if (value !== undefined) {
      environment[name] = value;
    }
  }
  return environment;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}
