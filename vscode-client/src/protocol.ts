// What the server sends and accepts beyond standard LSP (server/rewrites.py, server/lenses.py). Types only,
// plus the names: the extension reads results, it never computes them.

export const RESULT_NOTIFICATION = 'cudaAgent/result';
/** Sent once the server knows its GPU (before any result), and again if that changes. */
export const STATUS_NOTIFICATION = 'cudaAgent/status';

export interface ServerStatus {
  gpu: string | null; // the GPU's name, null when there is none
  available: boolean;
  reason: string; // why there is none
}

/** workspace/executeCommand commands of the server; arguments are [uri, kernelName] (rejectRewrite's may add
 * one of REJECT_REASONS). */
export const ServerCommands = {
  optimize: 'cudaAgent.optimize',
  applyRewrite: 'cudaAgent.applyRewrite',
  rejectRewrite: 'cudaAgent.rejectRewrite',
  addSpec: 'cudaAgent.addSpec',
  cancelOptimization: 'cudaAgent.cancelOptimization',
  showTranscript: 'cudaAgent.showTranscript', // the LLM proposer's conversation behind a result
} as const;

/** Why a user rejects a suggestion, as the server records it (agent/feedback.py's REJECT_REASONS, same
 * order): a fixed vocabulary, so that the exported training pairs can be filtered by it. */
export const REJECT_REASONS = [
  'slower on my real sizes',
  'unreadable',
  'changes numerics I care about',
  'wrong assumption',
  'other',
] as const;
export type RejectReason = (typeof REJECT_REASONS)[number];

/** Declared in the client capabilities' `experimental` (server/capabilities.py): this extension asks for a
 * reject's reason itself, so the server offers no "Reject suggestion: <reason>" code actions to VS Code. */
export const EXPERIMENTAL_CAPABILITIES = { cudaAgent: { rejectReasons: true } } as const;

export interface MeasuredTime {
  median_ms: number;
  p10_ms: number;
  p90_ms: number;
  runs: number;
  bandwidth_gbs: number | null;
  roofline_fraction: number | null;
}

export interface CandidateRow {
  candidate_id: string;
  description: string;
  proposer: string;
  status: string; // faster, no gain, slower, rejected, compile error, timeout, verified, ...
  speedup: number | null;
  reason: string;
}

export interface Rewrite {
  candidate_id: string;
  description: string;
  proposer: string;
  source: string; // the whole rewritten file
  assumptions: string[];
  speedup: number;
  original: MeasuredTime;
  best: MeasuredTime;
  decision: string;
  flags: string[];
  ratio_ci: [number, number] | null;
}

/** The `cudaAgent/result` notification: one kernel of one document version. */
export interface OptimizeResult {
  uri: string;
  version: number;
  kernel: string;
  gpu: string;
  input_sets: number;
  sizes: number;
  explanation: string;
  measured_at: string;
  original: MeasuredTime | null;
  rewrite: Rewrite | null;
  candidates: CandidateRow[];
  torch_eager: MeasuredTime | null;
  torch_compile: MeasuredTime | null;
  torch_note: string;
  searching: boolean; // the best so far; a final result follows
  llm?: string; // the LLM proposer's session in a line, where it ran
  transcript_turns?: number; // its conversation's length (cudaAgent.showTranscript returns it)
}

export interface TranscriptAnswer {
  found: boolean;
  reason?: string;
  markdown?: string;
}

export interface OptimizeAnswer {
  started: boolean;
  reason: string;
}
