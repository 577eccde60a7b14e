import assert from 'node:assert/strict';
import { test } from 'node:test';
import { chooseInterpreter, describeInterpreter, expandPath } from '../../src/interpreter';

const base = { setting: '', pythonExtension: undefined, platform: 'linux', workspaceFolder: '/ws', home: '/home/me' };

test('the setting wins, then the Python extension, then python3 on PATH', () => {
  assert.deepEqual(chooseInterpreter({ ...base, setting: '/opt/py/bin/python', pythonExtension: '/venv/bin/python' }), {
    command: '/opt/py/bin/python',
    source: 'setting',
  });
  assert.deepEqual(chooseInterpreter({ ...base, pythonExtension: '/venv/bin/python' }), {
    command: '/venv/bin/python',
    source: 'Python extension',
  });
  assert.deepEqual(chooseInterpreter(base), { command: 'python3', source: 'PATH' });
  assert.deepEqual(chooseInterpreter({ ...base, platform: 'win32' }), { command: 'python', source: 'PATH' });
});

test('a blank setting counts as unset', () => {
  assert.equal(chooseInterpreter({ ...base, setting: '  ' }).source, 'PATH');
});

test('the usual path variables expand', () => {
  assert.equal(expandPath('${workspaceFolder}/.venv/bin/python', base), '/ws/.venv/bin/python');
  assert.equal(expandPath('~/.venv/bin/python', base), '/home/me/.venv/bin/python');
  assert.equal(expandPath('${userHome}/py', base), '/home/me/py');
  assert.equal(expandPath('/abs/~/python', base), '/abs/~/python');
});

test('the description names where the interpreter came from', () => {
  assert.equal(describeInterpreter({ command: 'python3', source: 'PATH' }), 'python3 (on PATH)');
  assert.match(describeInterpreter({ command: '/p', source: 'setting' }), /cudaAgent\.interpreter/);
});
