import assert from 'node:assert/strict';
import { test } from 'node:test';
import { explainFailure, stderrLevel } from '../../src/failure';

const python = { command: '/venv/bin/python', source: 'setting' as const };

test('a missing interpreter says to set cudaAgent.interpreter', () => {
  const explanation = explainFailure({
    mode: 'stdio',
    interpreter: python,
    error: 'spawn /venv/bin/python ENOENT',
    stderr: [],
  });
  assert.match(explanation.message, /was not found/);
  assert.match(explanation.message, /cudaAgent\.interpreter/);
  assert.equal(explanation.openSettings, true);
});

test('a Python without the server says how to install it', () => {
  const explanation = explainFailure({
    mode: 'stdio',
    interpreter: python,
    error: 'Connection to server got closed',
    stderr: ['/venv/bin/python: No module named cuda_agent'],
  });
  assert.match(explanation.message, /not installed/);
  assert.ok(explanation.message.includes('/venv/bin/python -m pip install cuda-agent'), explanation.message);
});

test('a missing dependency is named', () => {
  const explanation = explainFailure({
    mode: 'stdio',
    interpreter: python,
    error: 'closed',
    stderr: [
      'Traceback (most recent call last):',
      '  File "x.py", line 1',
      "ModuleNotFoundError: No module named 'pygls'",
    ],
  });
  assert.match(explanation.message, /No module named 'pygls'/);
  assert.match(explanation.message, /--force-reinstall/);
});

test('any other failure quotes the last line the server wrote', () => {
  const explanation = explainFailure({
    mode: 'stdio',
    interpreter: python,
    error: 'closed',
    stderr: [
      'cuda-agent ERROR: something broke',
      'Traceback (most recent call last):',
      '  File "a.py", line 2',
      'RuntimeError: no tree-sitter',
      '',
    ],
  });
  assert.match(explanation.message, /RuntimeError: no tree-sitter$/);
});

test('remote failures: refused token, nothing listening, unknown host', () => {
  const token = explainFailure({
    mode: 'tcp',
    address: 'gpu:2087',
    error: 'cuda-agent: this server needs a token: set initializationOptions {"token": "..."}',
  });
  assert.match(token.message, /cudaAgent\.server\.token/);
  const refused = explainFailure({
    mode: 'tcp',
    address: 'localhost:2087',
    error: 'ECONNREFUSED: connect ECONNREFUSED 127.0.0.1:2087',
  });
  assert.match(refused.message, /nothing listens on localhost:2087/);
  assert.match(refused.message, /ssh -N -L 2087:localhost:2087/);
  assert.match(
    explainFailure({ mode: 'tcp', address: 'nowhere:1', error: 'getaddrinfo ENOTFOUND nowhere' }).message,
    /unknown/,
  );
});

test('stderr lines are logged at the level the server gave them', () => {
  assert.equal(stderrLevel('cuda-agent INFO: client connected', undefined), 'info');
  assert.equal(stderrLevel('cuda-agent WARNING: settings', 'info'), 'warn');
  assert.equal(stderrLevel('cuda-agent ERROR: failed', 'info'), 'error');
  assert.equal(stderrLevel('Traceback (most recent call last):', 'error'), 'error'); // continues the record
  assert.equal(stderrLevel('  more of an info record', 'info'), 'info');
  assert.equal(stderrLevel('/usr/bin/python3: No module named cuda_agent', undefined), 'error');
});
