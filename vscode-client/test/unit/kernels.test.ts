import assert from 'node:assert/strict';
import { test } from 'node:test';
import { inSpecComment, kernelAtLine, kernelsFromLenses } from '../../src/kernels';

const uri = 'file:///w/elementwise.cu';
function lens(line: number, command: string, name: string) {
  return { range: { start: { line } }, command: { command, arguments: [uri, name] } };
}

// examples/elementwise.cu: relu at line 3, saxpy's spec comment at lines 12-28, saxpy at line 29.
const text = [
  '// Element-wise kernels',
  '',
  '// No spec',
  '__global__ void relu(const float* x, float* y, int n)',
  '{',
  '}',
  '',
  '',
  '',
  '',
  '',
  '',
  '/* cuda-agent',
  '[sizes]',
  'n = 16_777_216',
  ...Array.from({ length: 12 }, () => ''),
  'block = [128]',
  '*/',
  '__global__ void saxpy(float a, const float* x, float* y, int n)',
  '{',
  '    if (i < n) y[i] = a * x[i] + y[i]; /* not a spec */',
  '}',
];

const lenses = [
  { range: { start: { line: 3 } }, command: { command: '', arguments: undefined } },
  lens(3, 'cudaAgent.optimize', 'relu'),
  lens(3, 'cudaAgent.addSpec', 'relu'),
  { range: { start: { line: 29 } }, command: { command: '', arguments: [] } }, // "⚡ 1.27× verified", a label
  lens(29, 'cudaAgent.applyRewrite', 'saxpy'),
  lens(29, 'cudaAgent.rejectRewrite', 'saxpy'),
];

test('the kernels and their first lines come from the lenses', () => {
  assert.deepEqual(kernelsFromLenses(lenses), [
    { name: 'relu', line: 3 },
    { name: 'saxpy', line: 29 },
  ]);
  assert.deepEqual(kernelsFromLenses([]), []);
});

test('the cursor picks the kernel it is in, or the one whose spec it is in', () => {
  const kernels = kernelsFromLenses(lenses);
  assert.equal(kernelAtLine(kernels, 3, text), 'relu');
  assert.equal(kernelAtLine(kernels, 5, text), 'relu');
  assert.equal(kernelAtLine(kernels, 14, text), 'saxpy'); // in saxpy's spec comment
  assert.equal(kernelAtLine(kernels, 28, text), 'saxpy'); // on its closing line
  assert.equal(kernelAtLine(kernels, 31, text), 'saxpy');
  assert.equal(kernelAtLine(kernels, 0, text), undefined); // above every kernel: ask
  assert.equal(kernelAtLine([{ name: 'only', line: 10 }], 0), 'only');
});

test('spec comments are told from other comments', () => {
  assert.equal(inSpecComment(text, 13), true);
  assert.equal(inSpecComment(text, 29), false);
  assert.equal(inSpecComment(text, 31), false);
  assert.equal(inSpecComment(['/* other', 'x', '*/'], 1), false);
});
