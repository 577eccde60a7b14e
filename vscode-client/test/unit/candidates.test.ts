import assert from 'node:assert/strict';
import { test } from 'node:test';
import { candidatesModel, formatMs, rooflineMs, verificationOf } from '../../src/candidates';
import { candidatesHtml, chartSvg, escapeHtml, noResultHtml } from '../../src/candidatesHtml';
import { saxpyResult } from './fixtures';

test('every candidate is listed with its change, verification, time and speedup', () => {
  const model = candidatesModel(saxpyResult());
  assert.equal(model.candidates.length, 13);
  assert.equal(model.headline, 'saxpy: block 256 (256 threads; was 128): 1.27× faster (0.0832 ms → 0.0653 ms)');
  const best = model.candidates.filter((c) => c.best);
  assert.equal(best.length, 1);
  assert.equal(best[0].description, 'block 256 (256 threads; was 128)');
  assert.equal(best[0].timeMs, 0.0653); // measured, not estimated
  const vectorize = model.candidates[0];
  assert.equal(vectorize.verification, 'verified');
  assert.equal(vectorize.status, 'no gain');
  assert.ok(Math.abs((vectorize.timeMs ?? 0) - 0.0832) < 1e-9); // speedup 1.0: the original's time
});

test('the chart has the original and every timed candidate, and the roofline', () => {
  const model = candidatesModel(saxpyResult());
  assert.equal(model.bars[0].kind, 'original');
  assert.equal(model.bars.length, 14);
  assert.equal(model.bars.filter((b) => b.kind === 'best').length, 1);
  assert.ok(model.rooflineMs !== null && Math.abs(model.rooflineMs - 0.0832 * 0.578067551177919) < 1e-12);
  const svg = chartSvg(model);
  assert.equal((svg.match(/<rect /g) ?? []).length, 14);
  assert.match(svg, /roofline 0\.0481 ms/);
});

test('failed candidates are listed but not charted', () => {
  const result = saxpyResult();
  result.candidates = [
    ...result.candidates,
    {
      candidate_id: 'x',
      description: 'unrolled <4>',
      proposer: 'unroll',
      status: 'rejected',
      speedup: null,
      reason: 'mismatch at y[3]',
    },
    {
      candidate_id: 'y',
      description: 'bad',
      proposer: 'llm:m',
      status: 'compile error',
      speedup: null,
      reason: 'line 3: error',
    },
  ];
  const model = candidatesModel(result);
  assert.equal(model.candidates.length, 15);
  assert.equal(model.bars.length, 14);
  assert.deepEqual(
    model.candidates.slice(-2).map((c) => c.verification),
    ['rejected', 'did not compile'],
  );
  const html = candidatesHtml(model, { nonce: 'n0nce', cspSource: 'vscode-resource:', current: true });
  assert.match(html, /unrolled &lt;4&gt;/); // escaped
  assert.match(html, /✗ rejected/);
  assert.match(html, /mismatch at y\[3\]/);
});

test('the page offers the actions only while the result describes the text', () => {
  const model = candidatesModel(saxpyResult());
  const current = candidatesHtml(model, { nonce: 'abc', cspSource: 'src:', current: true });
  assert.match(current, /data-command="apply"/);
  assert.match(current, /script-src 'nonce-abc'/);
  assert.match(current, /Assumes: nothing beyond the spec\./);
  const stale = candidatesHtml(model, { nonce: 'abc', cspSource: 'src:', current: false });
  assert.doesNotMatch(stale, /data-command="apply"/);
  assert.match(stale, /earlier version/);
});

test('a search still going on says so; no rewrite, no actions', () => {
  const searching = candidatesModel(saxpyResult({ searching: true }));
  assert.match(candidatesHtml(searching, { nonce: 'a', cspSource: 's', current: true }), /best so far/);
  const none = candidatesModel(saxpyResult({ rewrite: null }));
  assert.equal(none.headline, 'saxpy: no verified faster rewrite');
  assert.doesNotMatch(candidatesHtml(none, { nonce: 'a', cspSource: 's', current: true }), /data-command=/);
});

test('helpers', () => {
  assert.equal(verificationOf('faster'), 'verified');
  assert.equal(verificationOf('timeout'), 'failed');
  assert.equal(rooflineMs(null), null);
  assert.equal(formatMs(0.06534), '0.0653 ms');
  assert.equal(formatMs(1234.5), '1235 ms');
  assert.equal(escapeHtml(`<a href="x">'&'</a>`), '&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;');
});

test('without a result the page says why and what to do', () => {
  const html = noResultHtml('sax<py>');
  assert.match(html, /No current result for sax&lt;py&gt;/);
  assert.match(html, /Optimize Kernel/);
});

test('where the LLM proposer ran, its session is summarised and its transcript offered', () => {
  const plain = candidatesModel(saxpyResult());
  assert.equal(plain.hasTranscript, false);
  assert.doesNotMatch(
    candidatesHtml(plain, { nonce: 'a', cspSource: 's', current: true }),
    /data-command="transcript"/,
  );
  const model = candidatesModel(
    saxpyResult({ llm: '4 turns, 31k tokens, est. $0.12, stopped: no gain', transcript_turns: 8 }),
  );
  assert.equal(model.hasTranscript, true);
  assert.ok(model.details.includes('LLM proposer: 4 turns, 31k tokens, est. $0.12, stopped: no gain.'));
  assert.match(candidatesHtml(model, { nonce: 'a', cspSource: 's', current: false }), /data-command="transcript"/);
});
