import assert from 'node:assert/strict';
import { test } from 'node:test';
import { JobTracker } from '../../src/jobs';
import { statusText, type StatusInput } from '../../src/statusText';

const idle: StatusInput = {
  server: 'running',
  where: 'local',
  gpu: undefined,
  jobs: [],
  lastEnded: undefined,
  failure: undefined,
};

test('progress reports become the running job, and its end the last headline', () => {
  const jobs = new JobTracker();
  assert.equal(jobs.handle('t1', { kind: 'begin', title: 'Optimizing softmax', percentage: 0 }), true);
  assert.equal(jobs.running()[0].message, 'Optimizing softmax…');
  jobs.handle('t1', { kind: 'report', message: 'softmax: 14 candidates, best 6.10×', percentage: 40 });
  assert.deepEqual(jobs.running(), [
    { token: 't1', kernel: 'softmax', message: 'softmax: 14 candidates, best 6.10×', percentage: 40 },
  ]);
  jobs.handle('t1', { kind: 'end', message: 'softmax: verified rewrite 6.10× faster' });
  assert.deepEqual(jobs.running(), []);
  assert.deepEqual(jobs.lastEnded(), { kernel: 'softmax', message: 'softmax: verified rewrite 6.10× faster' });
});

test('progress that is not an optimization is not ours', () => {
  const jobs = new JobTracker();
  assert.equal(jobs.handle(7, { kind: 'begin', title: 'Indexing' }), false);
  assert.equal(jobs.handle(7, { kind: 'report', message: 'x' }), false);
  assert.deepEqual(jobs.running(), []);
});

test('a running job shows its progress message; a click shows the candidates', () => {
  const jobs = new JobTracker();
  jobs.handle('t', { kind: 'begin', title: 'Optimizing softmax' });
  jobs.handle('t', { kind: 'report', message: 'softmax: 14 candidates, best 6.1×' });
  const status = statusText({ ...idle, gpu: 'NVIDIA H200', jobs: jobs.running() });
  assert.equal(status.text, '$(sync~spin) softmax: 14 candidates, best 6.1×');
  assert.match(status.tooltip, /Optimizing softmax on NVIDIA H200/);
  assert.equal(status.command, 'cudaAgent.showCandidates');
});

test('idle shows the GPU (once known) and the last result', () => {
  assert.equal(statusText(idle).text, '$(chip) CUDA Agent · idle');
  const status = statusText({
    ...idle,
    gpu: 'NVIDIA H200',
    lastEnded: { kernel: 'saxpy', message: 'saxpy: verified rewrite 1.27× faster' },
  });
  assert.equal(status.text, '$(chip) NVIDIA H200 · idle');
  assert.match(status.tooltip, /Last: saxpy: verified rewrite 1\.27× faster/);
});

test('a remote server is named; its loss shows as reconnecting', () => {
  assert.match(statusText({ ...idle, where: 'localhost:2087', gpu: 'NVIDIA H200' }).tooltip, /on localhost:2087/);
  const lost = statusText({ ...idle, server: 'reconnecting', where: 'localhost:2087' });
  assert.match(lost.text, /reconnecting/);
  assert.equal(lost.warning, true);
});

test('a server that is not running points at the log', () => {
  const status = statusText({
    ...idle,
    server: 'failed',
    failure: 'CUDA Agent: the server is not installed for python3 (on PATH).',
  });
  assert.equal(status.text, '$(error) CUDA Agent: not running');
  assert.equal(status.command, 'cudaAgent.showLog');
  assert.match(status.tooltip, /not installed/);
});
