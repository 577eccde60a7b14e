import assert from 'node:assert/strict';
import { test } from 'node:test';
import { initializationOptions, readClientSettings, serverEnvironment, serverSettings } from '../../src/settings';

const section = {
  interpreter: '/venv/bin/python',
  server: { address: 'localhost:2087', token: 'secret' },
  llm: { provider: 'anthropic', model: 'claude' },
  trigger: 'manual',
  idleSeconds: 2,
  gpuIndex: 1,
  searchBudgetSeconds: 30,
  proposers: [],
  feedback: false,
};

function reader(values: Record<string, unknown>) {
  return { get: <T>(key: string) => values[key] as T | undefined };
}

test('the server sees its own settings and the LLM ones, never the token or local paths', () => {
  assert.deepEqual(serverSettings(section), {
    llm: { provider: 'anthropic', model: 'claude' },
    trigger: 'manual',
    idleSeconds: 2,
    gpuIndex: 1,
    searchBudgetSeconds: 30,
    proposers: [],
    feedback: false,
  });
  assert.equal(serverSettings(null), null);
  assert.equal(serverSettings([1, 2]), null);
});

test('the LLM key comes from secret storage, never from plain settings', () => {
  const written = { ...section, llm: { provider: 'anthropic', apiKey: 'typed-into-settings.json' } };
  assert.deepEqual(serverSettings(written)?.llm, { provider: 'anthropic' });
  assert.deepEqual(serverSettings(written, 'from-secret-storage')?.llm, {
    provider: 'anthropic',
    apiKey: 'from-secret-storage',
  });
  assert.deepEqual(serverSettings({ trigger: 'save' }, 'k')?.llm, { apiKey: 'k' });
  assert.equal('llm' in (serverSettings({ trigger: 'save' }) ?? {}), false);
});

test('initializationOptions carry the server settings and the token', () => {
  const client = readClientSettings(reader({ 'server.token': 'secret', 'llm.provider': 'anthropic' }));
  const options = initializationOptions(section, client, {}, 'key');
  assert.equal(options.token, 'secret');
  assert.deepEqual(options.llm, { provider: 'anthropic', model: 'claude', apiKey: 'key' });
  assert.equal(options.trigger, 'manual');
  assert.equal('server' in options, false);
  assert.equal('interpreter' in options, false);
});

test('the token falls back to CUDA_AGENT_TOKEN', () => {
  const client = readClientSettings(reader({}));
  assert.equal(initializationOptions({}, client, { CUDA_AGENT_TOKEN: 'from-env' }).token, 'from-env');
  assert.equal('token' in initializationOptions({}, client, {}), false);
});

test('client settings have defaults', () => {
  assert.deepEqual(readClientSettings(reader({})), {
    interpreter: '',
    serverAddress: '',
    serverToken: '',
    llmProvider: 'default',
  });
});

test("the provider's default is left to the server; a chosen one is sent", () => {
  const defaulted = serverSettings({ llm: { provider: 'default', model: '' } });
  assert.deepEqual(defaulted?.llm, { model: '' });
  const chosen = serverSettings({ llm: { provider: 'off' } });
  assert.deepEqual(chosen?.llm, { provider: 'off' });
});

test('the server inherits the environment', () => {
  const env = serverEnvironment({ PATH: '/bin', CUDA_AGENT_RECORDED_WORKER: '/r.json', UNSET: undefined });
  assert.deepEqual(env, { PATH: '/bin', CUDA_AGENT_RECORDED_WORKER: '/r.json' });
});
