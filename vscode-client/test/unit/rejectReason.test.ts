import assert from 'node:assert/strict';
import { test } from 'node:test';
import { REJECT_REASONS } from '../../src/protocol';
import { reasonChoices, reasonFromArguments, rejectArguments, SKIP_LABEL } from '../../src/rejectReason';

test('after Reject the reasons are offered in the server order, then a way to skip', () => {
  const choices = reasonChoices();
  assert.deepEqual(
    choices.map((c) => c.label),
    [...REJECT_REASONS, SKIP_LABEL],
  );
  assert.equal(choices.at(-1)?.reason, undefined);
  assert.equal(choices[0]?.reason, 'slower on my real sizes');
});

test('the reason travels as the third argument, and only when there is one', () => {
  assert.deepEqual(rejectArguments('file:///a.cu', 'saxpy', 'unreadable'), ['file:///a.cu', 'saxpy', 'unreadable']);
  assert.deepEqual(rejectArguments('file:///a.cu', 'saxpy', undefined), ['file:///a.cu', 'saxpy']);
});

test('a reason already among the arguments is taken; anything else is not a reason', () => {
  assert.equal(reasonFromArguments(['file:///a.cu', 'saxpy', 'wrong assumption']), 'wrong assumption');
  assert.equal(reasonFromArguments(['file:///a.cu', 'saxpy']), undefined);
  assert.equal(reasonFromArguments(['file:///a.cu', 'saxpy', 'too clever']), undefined);
  assert.equal(reasonFromArguments(['file:///a.cu', 'saxpy', 3]), undefined);
});
