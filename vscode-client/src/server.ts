// Starting, connecting to and restarting the language server. Locally it is `<python> -m cuda_agent serve`
// over stdio; remotely a socket to a headless `cuda-agent serve --tcp` that is reconnected when it drops.
// Failures end in one message that says what to do, with a "Show Log" button.

import { type ChildProcess, spawn } from 'node:child_process';
import * as net from 'node:net';
import * as os from 'node:os';
import * as readline from 'node:readline';
import type { Readable } from 'node:stream';
import * as vscode from 'vscode';
import {
  type ClientCapabilities,
  CloseAction,
  type CloseHandlerResult,
  CodeLensRequest,
  DidChangeConfigurationNotification,
  ErrorAction,
  ExecuteCommandRequest,
  type FeatureState,
  LanguageClient,
  type LanguageClientOptions,
  RevealOutputChannelOn,
  type ServerOptions,
  State,
  type StaticFeature,
  type StreamInfo,
  WorkDoneProgressCancelNotification,
} from 'vscode-languageclient/node';
import { formatAddress, parseServerAddress, type ServerAddress } from './address';
import { type Explanation, explainFailure, type LogLevel, stderrLevel } from './failure';
import { chooseInterpreter, type InterpreterChoice } from './interpreter';
import type { ProgressValue } from './jobs';
import type { LensLike } from './kernels';
import {
  EXPERIMENTAL_CAPABILITIES,
  RESULT_NOTIFICATION,
  STATUS_NOTIFICATION,
  type OptimizeResult,
  ServerCommands,
  type ServerStatus,
} from './protocol';
import { selectedInterpreter } from './pythonExtension';
import {
  type ClientSettings,
  initializationOptions,
  LLM_KEY_ENV,
  readClientSettings,
  SECTION,
  serverEnvironment,
  serverSettings,
} from './settings';
import type { ServerState } from './statusText';

const SERVE_ARGS = ['-m', 'cuda_agent', 'serve'];
const LOCAL_RESTARTS = 4; // crashes within RESTART_WINDOW_MS before giving up (the client's own default)
const RESTART_WINDOW_MS = 3 * 60_000;
const STDERR_TAIL = 40; // lines kept to explain a failed start
const RECONNECT_MAX_MS = 30_000;
const LENS_ROUTES: Readonly<Record<string, string>> = {
  [ServerCommands.applyRewrite]: 'cudaAgent.applyVerifiedRewrite',
  [ServerCommands.rejectRewrite]: 'cudaAgent.rejectSuggestion',
};

export interface ServerHooks {
  onState(state: ServerState): void;
  onResult(result: OptimizeResult): void;
  onStatus(status: ServerStatus): void;
  onProgress(token: string | number, value: ProgressValue): void;
  onReady(): void;
}

export function llmKeySecret(provider: string): string {
  return `cudaAgent.llm.${provider}.apiKey`;
}

/** The extension explains failures itself, with what to do next; the client's own generic notifications
 * ("couldn't create connection to server") would be a second, vaguer message, so they only go to the log. */
class QuietLanguageClient extends LanguageClient {
  override error(message: string, data?: unknown, _showNotification?: boolean | 'force'): void {
    if (message === 'Stopping server failed') {
      // After a failed initialize the client stops itself while still "starting", which it cannot: noise.
      this.outputChannel.debug(`${message}: ${data instanceof Error ? data.message : String(data)}`);
      return;
    }
    super.error(message, data, false);
  }
}

/** What this extension does beyond the protocol, declared under `experimental` at initialize. */
class OwnCapabilities implements StaticFeature {
  fillClientCapabilities(capabilities: ClientCapabilities): void {
    capabilities.experimental = { ...(capabilities.experimental as object | undefined), ...EXPERIMENTAL_CAPABILITIES };
  }
  initialize(): void {}
  getState(): FeatureState {
    return { kind: 'static' };
  }
  clear(): void {}
}

export class ServerConnection implements vscode.Disposable {
  state: ServerState = 'stopped';
  where = 'local';
  failure: string | undefined;

  private client: LanguageClient | undefined;
  private generation = 0; // bumped by stop(): callbacks of an older client are ignored
  private abort = new AbortController();
  private child: ChildProcess | undefined;
  private childExited: Promise<void> = Promise.resolve();
  private stderrTail: string[] = [];
  private restarts: number[] = [];
  private reachedRunning = false;
  private refused = false;
  private explained = false; // one message per failure
  private interpreter: InterpreterChoice | undefined;
  private llmKey: string | undefined; // from secret storage, for the provider chosen
  private lastError: string | undefined; // what failed, for the explanation (state changes arrive first)

  constructor(
    private readonly context: vscode.ExtensionContext,
    private readonly log: vscode.LogOutputChannel,
    private readonly hooks: ServerHooks,
  ) {}

  /** The client once it is running (commands need an answering server). */
  get running(): LanguageClient | undefined {
    return this.client?.isRunning() ? this.client : undefined;
  }

  async start(): Promise<void> {
    const generation = ++this.generation;
    this.abort = new AbortController();
    this.reachedRunning = this.refused = this.explained = false;
    this.failure = this.lastError = undefined;
    const settings = readClientSettings(vscode.workspace.getConfiguration(SECTION));
    const parsed = parseServerAddress(settings.serverAddress);
    if (parsed !== null && !parsed.ok) {
      this.where = settings.serverAddress;
      this.fail({ message: `CUDA Agent: cudaAgent.server.address ${parsed.error}`, openSettings: true });
      return;
    }
    const remote = parsed?.address;
    this.where = remote ? formatAddress(remote) : 'local';
    this.llmKey = await this.storedLlmKey(settings.llmProvider);
    if (generation !== this.generation) {
      return; // stopped or restarted meanwhile
    }
    let serverOptions: ServerOptions;
    if (remote) {
      serverOptions = () => this.connect(remote, generation);
      this.log.info(`Connecting to the server at ${this.where}`);
    } else {
      const interpreter = await this.chooseInterpreter(settings);
      if (generation !== this.generation) {
        return; // stopped or restarted meanwhile
      }
      this.interpreter = interpreter;
      const environment = serverEnvironment(process.env);
      serverOptions = () => this.spawnServer(interpreter, environment);
      this.log.info(`Starting the server: ${interpreter.command} ${SERVE_ARGS.join(' ')} (${interpreter.source})`);
    }
    const client = new QuietLanguageClient(
      'cudaAgent',
      'CUDA Agent',
      serverOptions,
      this.clientOptions(settings, generation, remote !== undefined),
    );
    client.registerFeature(new OwnCapabilities());
    client.onNotification(RESULT_NOTIFICATION, (result: OptimizeResult) => this.hooks.onResult(result));
    client.onNotification(STATUS_NOTIFICATION, (status: ServerStatus) => this.hooks.onStatus(status));
    client.onDidChangeState((event) => {
      if (generation !== this.generation) {
        return;
      }
      if (event.newState === State.Running) {
        this.reachedRunning = true;
        this.explained = false;
        this.failure = undefined;
        this.setState('running');
        this.hooks.onReady();
      } else if (event.newState === State.StartFailed || event.newState === State.Stopped) {
        void this.explainStop(generation);
      }
    });
    this.client = client;
    this.setState('starting');
    try {
      await client.start();
    } catch (error) {
      this.log.error(`The server did not start: ${messageOf(error)}`);
      if (generation === this.generation) {
        await this.explainStop(generation, messageOf(error));
      }
    }
  }

  async stop(): Promise<void> {
    this.generation++;
    this.abort.abort();
    const client = this.client;
    const child = this.child;
    this.client = this.child = undefined;
    if (client !== undefined) {
      try {
        await client.dispose(2000);
      } catch (error) {
        // A client still starting cannot be stopped politely; ending its process ends it.
        this.log.debug(`Stopping the client: ${messageOf(error)}`);
      }
    }
    if (child !== undefined && child.exitCode === null && child.signalCode === null) {
      child.kill();
    }
    this.setState('stopped');
  }

  async restart(): Promise<void> {
    this.log.info('Restarting the server');
    await this.stop();
    this.restarts = [];
    await this.start();
  }

  dispose(): void {
    void this.stop();
  }

  /** workspace/executeCommand on the server: its answer, or undefined when no server is running. */
  async executeCommand<T>(command: string, args: unknown[]): Promise<T | undefined> {
    const client = this.running;
    if (client === undefined) {
      return undefined;
    }
    return (await client.sendRequest(ExecuteCommandRequest.type, { command, arguments: args })) as T;
  }

  async codeLenses(uri: vscode.Uri): Promise<LensLike[]> {
    const client = this.running;
    if (client === undefined) {
      return [];
    }
    const lenses = await client.sendRequest(CodeLensRequest.type, {
      textDocument: { uri: client.code2ProtocolConverter.asUri(uri) },
    });
    return lenses ?? [];
  }

  private refreshCodeLenses(uri: vscode.Uri): void {
    const document = vscode.workspace.textDocuments.find((d) => d.uri.toString() === uri.toString());
    const lenses = document && this.client?.getFeature(CodeLensRequest.method).getProvider(document);
    lenses?.onDidChangeCodeLensEmitter.fire();
  }

  /** What cancelling the progress notification does: the server stops that search. */
  async cancelProgress(token: string): Promise<void> {
    await this.running?.sendNotification(WorkDoneProgressCancelNotification.type, { token });
  }

  /** Settings the server reads itself (or the stored LLM key) changed: it pulls them again. */
  async settingsChanged(): Promise<void> {
    this.llmKey = await this.storedLlmKey(readClientSettings(vscode.workspace.getConfiguration(SECTION)).llmProvider);
    const section = vscode.workspace.getConfiguration().get(SECTION);
    await this.running?.sendNotification(DidChangeConfigurationNotification.type, {
      settings: { [SECTION]: serverSettings(section, this.llmKey) },
    });
  }

  /** The log and the status bar show why; a message offers the log (and the settings where they are the fix). */
  private fail(explanation: Explanation): void {
    this.failure = explanation.message;
    this.log.error(explanation.message);
    this.setState('failed');
    this.explainOnce(explanation, 'error');
  }

  private async explainStop(generation: number, error?: string): Promise<void> {
    if (this.state === 'failed' || this.state === 'reconnecting') {
      return;
    }
    // The process's last stderr lines say why it stopped: wait for them (briefly).
    await Promise.race([this.childExited, new Promise((resolve) => setTimeout(resolve, 1000))]);
    // (Read again: the state may have changed while waiting.)
    if (generation !== this.generation || (this.state as ServerState) === 'failed') {
      return;
    }
    const reason = error ?? this.lastError ?? 'the server stopped';
    if (this.where === 'local') {
      const interpreter = this.interpreter ?? { command: 'python3', source: 'PATH' as const };
      this.fail(explainFailure({ mode: 'stdio', interpreter, error: reason, stderr: this.stderrTail }));
    } else {
      this.fail(explainFailure({ mode: 'tcp', address: this.where, error: reason }));
    }
  }

  private clientOptions(settings: ClientSettings, generation: number, remote: boolean): LanguageClientOptions {
    return {
      documentSelector: [
        { language: 'cuda-cpp', scheme: 'file' },
        { language: 'cuda-cpp', scheme: 'untitled' },
      ],
      outputChannel: this.log,
      revealOutputChannelOn: RevealOutputChannelOn.Never,
      initializationOptions: () =>
        initializationOptions(vscode.workspace.getConfiguration().get(SECTION), settings, process.env, this.llmKey),
      initializationFailedHandler: (error: unknown) => {
        this.lastError = messageOf(error);
        this.refused = /needs a token/.test(this.lastError);
        return false; // a refused token or a broken server: retrying the same initialize cannot help
      },
      errorHandler: {
        error: (_error, _message, count) => ({
          action: (count ?? 0) <= 3 ? ErrorAction.Continue : ErrorAction.Shutdown,
          handled: true,
        }),
        closed: () => this.closed(generation, remote),
      },
      stdioOptions: {
        stdout: (input) => this.logLines(input, () => 'info'),
        stderr: (input) => {
          let level: LogLevel | undefined;
          this.logLines(input, (line) => (level = stderrLevel(line, level)), true);
        },
      },
      middleware: {
        // The server publishes diagnostics whenever a kernel's results change (found, rejected, stale) but
        // sends no workspace/codeLens/refresh; VS Code would keep showing the old lenses until an edit.
        handleDiagnostics: (uri, diagnostics, next) => {
          next(uri, diagnostics);
          this.refreshCodeLenses(uri);
        },
        // The lenses' Apply and Reject run the extension's commands, so they act as the palette's do (the
        // diff before applying; the candidates view and status bar forget a rejected suggestion).
        executeCommand: async (command, args, next) => {
          const routed = LENS_ROUTES[command];
          return routed !== undefined ? vscode.commands.executeCommand(routed, ...args) : next(command, args);
        },
        handleWorkDoneProgress: (token, params, next) => {
          this.hooks.onProgress(token, params as ProgressValue);
          next(token, params);
        },
        workspace: {
          // The token and local paths are the extension's: the server gets its own settings only.
          configuration: async (params, token, next) => {
            const answer = await next(params, token);
            if (!Array.isArray(answer)) {
              return answer;
            }
            return answer.map((value, i) =>
              params.items[i]?.section === SECTION ? serverSettings(value, this.llmKey) : value,
            );
          },
        },
      },
    };
  }

  private closed(generation: number, remote: boolean): CloseHandlerResult {
    if (generation !== this.generation) {
      return { action: CloseAction.DoNotRestart, handled: true };
    }
    if (remote) {
      if (this.refused) {
        return { action: CloseAction.DoNotRestart, handled: true };
      }
      this.setState('reconnecting');
      return {
        action: CloseAction.Restart,
        handled: true,
        message: `The connection to ${this.where} closed; reconnecting.`,
      };
    }
    if (!this.reachedRunning) {
      return { action: CloseAction.DoNotRestart, handled: true }; // a failed start: start() explains it
    }
    const now = Date.now();
    this.restarts = this.restarts.filter((at) => now - at < RESTART_WINDOW_MS);
    if (this.restarts.length >= LOCAL_RESTARTS) {
      this.log.error(`The server stopped ${LOCAL_RESTARTS + 1} times in 3 minutes; not restarting it.`);
      return { action: CloseAction.DoNotRestart, handled: true };
    }
    this.restarts.push(now);
    this.setState('starting');
    return { action: CloseAction.Restart, handled: true, message: 'The server stopped; restarting it.' };
  }

  private async chooseInterpreter(settings: ClientSettings): Promise<InterpreterChoice> {
    const folder = vscode.workspace.workspaceFolders?.[0];
    const fromExtension = settings.interpreter.trim() === '' ? await selectedInterpreter(folder?.uri) : undefined;
    return chooseInterpreter({
      setting: settings.interpreter,
      pythonExtension: fromExtension,
      platform: process.platform,
      workspaceFolder: folder?.uri.fsPath,
      home: os.homedir(),
    });
  }

  private async storedLlmKey(provider: string): Promise<string | undefined> {
    if (!(provider in LLM_KEY_ENV)) {
      return undefined;
    }
    return this.context.secrets.get(llmKeySecret(provider));
  }

  private async spawnServer(
    interpreter: InterpreterChoice,
    environment: Record<string, string>,
  ): Promise<{ process: ChildProcess; detached: boolean }> {
    this.stderrTail = [];
    const cwd = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath ?? os.homedir();
    const child = spawn(interpreter.command, SERVE_ARGS, { env: environment, cwd, stdio: 'pipe' });
    this.childExited = new Promise((resolve) => child.once('close', () => resolve()));
    await new Promise<void>((resolve, reject) => {
      child.once('spawn', resolve);
      child.once('error', (error) => {
        this.lastError = messageOf(error); // ENOENT: no such interpreter
        reject(error);
      });
    });
    child.on('error', (error) => this.log.error(`Server process: ${error.message}`));
    child.once('exit', (code, signal) => this.log.info(`The server process exited (${signal ?? `code ${code}`})`));
    this.child = child;
    return { process: child, detached: false };
  }

  /** A socket to the remote server, retried with backoff until it answers or the client is stopped. */
  private async connect(address: ServerAddress, generation: number): Promise<StreamInfo> {
    const signal = this.abort.signal;
    let delay = 500;
    let attempt = 0;
    for (;;) {
      if (generation !== this.generation || signal.aborted) {
        throw new Error('stopped');
      }
      try {
        const socket = await openSocket(address, signal);
        if (attempt > 0) {
          this.log.info(`Connected to ${this.where}`);
        }
        return { reader: socket, writer: socket };
      } catch (error) {
        attempt++;
        const message = messageOf(error);
        this.log.warn(`Connecting to ${this.where} failed (${message}); retrying in ${delay / 1000} s`);
        if (attempt === 1 && !this.reachedRunning) {
          const explanation = explainFailure({ mode: 'tcp', address: this.where, error: message });
          this.failure = explanation.message;
          this.explainOnce(explanation, 'warning');
        }
        this.setState('reconnecting');
        await sleep(delay, signal);
        delay = Math.min(delay * 2, RECONNECT_MAX_MS);
      }
    }
  }

  private explainOnce(explanation: Explanation, severity: 'error' | 'warning'): void {
    if (this.explained) {
      return;
    }
    this.explained = true;
    const buttons = explanation.openSettings ? ['Show Log', 'Open Settings'] : ['Show Log'];
    const show = severity === 'error' ? vscode.window.showErrorMessage : vscode.window.showWarningMessage;
    void show(explanation.message, ...buttons).then((choice) => {
      if (choice === 'Show Log') {
        this.log.show();
      } else if (choice === 'Open Settings') {
        void vscode.commands.executeCommand('workbench.action.openSettings', SECTION);
      }
    });
  }

  private logLines(input: Readable, level: (line: string) => LogLevel, keep = false): void {
    readline.createInterface({ input, crlfDelay: Infinity, terminal: false }).on('line', (line) => {
      this.log[level(line)](line);
      if (keep) {
        this.stderrTail.push(line);
        if (this.stderrTail.length > STDERR_TAIL) {
          this.stderrTail.shift();
        }
      }
    });
  }

  private setState(state: ServerState): void {
    if (this.state !== state) {
      this.state = state;
      this.hooks.onState(state);
    }
  }
}

function openSocket(address: ServerAddress, signal: AbortSignal): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: address.host, port: address.port });
    const onAbort = (): void => {
      socket.destroy();
      reject(new Error('stopped'));
    };
    signal.addEventListener('abort', onAbort, { once: true });
    socket.once('connect', () => {
      signal.removeEventListener('abort', onAbort);
      socket.setNoDelay(true);
      socket.setKeepAlive(true, 15_000); // a dropped tunnel shows up as a closed connection, then a reconnect
      resolve(socket);
    });
    socket.once('error', (error) => {
      signal.removeEventListener('abort', onAbort);
      reject(error);
    });
  });
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener(
      'abort',
      () => {
        clearTimeout(timer);
        resolve();
      },
      { once: true },
    );
  });
}

function messageOf(error: unknown): string {
  if (error instanceof Error) {
    const code = (error as NodeJS.ErrnoException).code;
    return code && !error.message.includes(code) ? `${code}: ${error.message}` : error.message;
  }
  return String(error);
}
