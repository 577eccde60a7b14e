import assert from 'node:assert/strict';
import { test } from 'node:test';
import { formatAddress, parseServerAddress } from '../../src/address';

test('an empty address means a local server', () => {
  assert.equal(parseServerAddress(''), null);
  assert.equal(parseServerAddress('   '), null);
});

test('host:port, IPv6 in brackets and tcp:// parse', () => {
  assert.deepEqual(parseServerAddress('localhost:2087'), { ok: true, address: { host: 'localhost', port: 2087 } });
  assert.deepEqual(parseServerAddress(' gpu-box.lan:9000 '), {
    ok: true,
    address: { host: 'gpu-box.lan', port: 9000 },
  });
  assert.deepEqual(parseServerAddress('[::1]:2087'), { ok: true, address: { host: '::1', port: 2087 } });
  assert.deepEqual(parseServerAddress('tcp://10.0.0.5:2087/'), { ok: true, address: { host: '10.0.0.5', port: 2087 } });
});

test('bad addresses say what is expected', () => {
  for (const [text, says] of [
    ['localhost', 'expected host:port'],
    [':2087', 'expected host:port'],
    ['::1:2087', 'IPv6'],
    ['localhost:0', 'from 1 to 65535'],
    ['localhost:70000', 'from 1 to 65535'],
    ['localhost:http', 'from 1 to 65535'],
    ['ws://localhost:2087', '--tcp'],
    ['gpu box:2087', 'not a host name'],
  ] as const) {
    const parsed = parseServerAddress(text);
    assert.ok(parsed !== null && !parsed.ok, text);
    assert.match(parsed.error, new RegExp(says.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')), text);
  }
});

test('addresses print back the way they are written', () => {
  assert.equal(formatAddress({ host: 'localhost', port: 2087 }), 'localhost:2087');
  assert.equal(formatAddress({ host: '::1', port: 2087 }), '[::1]:2087');
});
