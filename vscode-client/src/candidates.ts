// The data of the "Show Candidates" view: every candidate of one kernel with its change, verification and
// time, and a chart of times against the roofline. Pure functions of one `cudaAgent/result`.

import type { MeasuredTime, OptimizeResult } from './protocol';

export type Verification = 'verified' | 'rejected' | 'did not compile' | 'failed';

export interface CandidateView {
  index: number; // 1-based, the order the server tried them
  id: string;
  description: string;
  proposer: string;
  status: string;
  verification: Verification;
  reason: string;
  speedup: number | null;
  timeMs: number | null; // estimated from the baseline and the paired speedup; measured for the best
  best: boolean;
}

export interface ChartBar {
  label: string;
  timeMs: number;
  kind: 'original' | 'best' | 'faster' | 'same' | 'slower';
}

export interface CandidatesModel {
  kernel: string;
  uri: string;
  version: number;
  gpu: string;
  headline: string;
  details: string[]; // verification scope, decision, assumptions, PyTorch timings
  searching: boolean;
  hasRewrite: boolean;
  hasTranscript: boolean; // the LLM proposer ran: its conversation can be shown
  originalMs: number | null;
  rooflineMs: number | null; // the time at which the kernel would run at the device's roofline
  candidates: CandidateView[];
  bars: ChartBar[];
}

const VERIFIED_STATUSES = new Set(['faster', 'no gain', 'slower', 'verified']);

export function verificationOf(status: string): Verification {
  if (VERIFIED_STATUSES.has(status)) {
    return 'verified';
  }
  if (status === 'rejected') {
    return 'rejected';
  }
  return status === 'compile error' ? 'did not compile' : 'failed';
}

export function candidatesModel(result: OptimizeResult): CandidatesModel {
  const original = result.rewrite?.original ?? result.original;
  const originalMs = original?.median_ms ?? null;
  const bestId = result.rewrite?.candidate_id;
  const candidates = result.candidates.map((row, i): CandidateView => {
    const best = row.candidate_id === bestId;
    const estimated = originalMs !== null && row.speedup ? originalMs / row.speedup : null;
    return {
      index: i + 1,
      id: row.candidate_id,
      description: row.description,
      proposer: row.proposer,
      status: row.status,
      verification: verificationOf(row.status),
      reason: row.reason,
      speedup: row.speedup,
      timeMs: best && result.rewrite ? result.rewrite.best.median_ms : estimated,
      best,
    };
  });
  const bars: ChartBar[] = [];
  if (originalMs !== null) {
    bars.push({ label: 'original', timeMs: originalMs, kind: 'original' });
  }
  for (const candidate of candidates) {
    if (candidate.timeMs !== null && candidate.verification === 'verified') {
      bars.push({ label: `#${candidate.index}`, timeMs: candidate.timeMs, kind: barKind(candidate) });
    }
  }
  return {
    kernel: result.kernel,
    uri: result.uri,
    version: result.version,
    gpu: result.gpu,
    headline: headline(result),
    details: details(result),
    searching: result.searching,
    hasRewrite: result.rewrite !== null,
    hasTranscript: (result.transcript_turns ?? 0) > 0,
    originalMs,
    rooflineMs: rooflineMs(original),
    candidates,
    bars,
  };
}

function barKind(candidate: CandidateView): ChartBar['kind'] {
  if (candidate.best) {
    return 'best';
  }
  if (candidate.status === 'faster') {
    return 'faster';
  }
  return candidate.status === 'slower' ? 'slower' : 'same';
}

/** At the roofline the kernel would take its time × the fraction of the roofline it reaches. */
export function rooflineMs(time: MeasuredTime | null | undefined): number | null {
  if (!time || !time.roofline_fraction || time.roofline_fraction <= 0) {
    return null;
  }
  return time.median_ms * time.roofline_fraction;
}

export function formatMs(ms: number): string {
  return ms >= 100 ? `${ms.toFixed(0)} ms` : `${ms.toPrecision(3)} ms`;
}

export function formatSpeedup(speedup: number): string {
  return `${speedup.toFixed(2)}×`;
}

function headline(result: OptimizeResult): string {
  const rewrite = result.rewrite;
  if (rewrite === null) {
    return `${result.kernel}: no verified faster rewrite`;
  }
  return (
    `${result.kernel}: ${rewrite.description}: ${formatSpeedup(rewrite.speedup)} faster ` +
    `(${formatMs(rewrite.original.median_ms)} → ${formatMs(rewrite.best.median_ms)})`
  );
}

function details(result: OptimizeResult): string[] {
  const lines = [
    `Measured on ${result.gpu}; a candidate is timed only after it was verified on ${result.input_sets} ` +
      `input sets at ${result.sizes} sizes.`,
  ];
  const rewrite = result.rewrite;
  if (rewrite !== null) {
    lines.push(
      `Assumes: ${rewrite.assumptions.length > 0 ? rewrite.assumptions.join('; ') : 'nothing beyond the spec'}.`,
    );
    lines.push(`Decision: ${rewrite.decision}.`);
    if (rewrite.ratio_ci) {
      const [low, high] = rewrite.ratio_ci;
      lines.push(`95% interval of the time ratio: ${low.toFixed(3)}–${high.toFixed(3)}.`);
    }
  }
  const torch = [
    result.torch_eager ? `PyTorch eager ${formatMs(result.torch_eager.median_ms)}` : '',
    result.torch_compile ? `torch.compile ${formatMs(result.torch_compile.median_ms)}` : '',
  ].filter(Boolean);
  if (torch.length > 0) {
    lines.push(`${torch.join(', ')}.`);
  } else if (result.torch_note) {
    lines.push(`${result.torch_note}.`);
  }
  if (result.llm) {
    lines.push(`LLM proposer: ${result.llm}.`);
  }
  lines.push(result.explanation);
  return lines;
}
