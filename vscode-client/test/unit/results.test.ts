import assert from 'node:assert/strict';
import { test } from 'node:test';
import { isCurrent, ResultStore } from '../../src/results';
import { saxpyResult } from './fixtures';

test('the latest result per kernel is kept; a late one for older text is not', () => {
  const store = new ResultStore();
  const seen: string[] = [];
  store.onDidChange((result, _uri, kernel) => seen.push(`${kernel}:${result ? result.version : 'gone'}`));
  store.update(saxpyResult({ version: 2, searching: true }));
  store.update(saxpyResult({ version: 2, searching: false }));
  store.update(saxpyResult({ version: 1 }));
  const kept = store.get('file:///work/elementwise.cu', 'saxpy');
  assert.equal(kept?.version, 2);
  assert.equal(kept?.searching, false);
  assert.deepEqual(seen, ['saxpy:2', 'saxpy:2']);
  assert.equal(store.latest()?.kernel, 'saxpy');
});

test('results are per document and go with a rejection or a closed document', () => {
  const store = new ResultStore();
  store.update(saxpyResult());
  store.update(saxpyResult({ kernel: 'relu' }));
  store.update(saxpyResult({ uri: 'file:///other.cu' }));
  assert.deepEqual(
    store.forDocument('file:///work/elementwise.cu').map((r) => r.kernel),
    ['saxpy', 'relu'],
  );
  store.remove('file:///work/elementwise.cu', 'saxpy');
  assert.equal(store.get('file:///work/elementwise.cu', 'saxpy'), undefined);
  store.clear('file:///work/elementwise.cu');
  assert.deepEqual(store.forDocument('file:///work/elementwise.cu'), []);
  assert.equal(store.forDocument('file:///other.cu').length, 1);
  assert.equal(store.latest()?.uri, 'file:///other.cu');
});

test('a result describes exactly the version it was found for', () => {
  assert.equal(isCurrent(saxpyResult({ version: 3 }), 3), true);
  assert.equal(isCurrent(saxpyResult({ version: 3 }), 4), false);
});
