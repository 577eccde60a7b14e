// What the status bar item says: the server's state, the GPU in use, the running job or idle.

import type { RunningJob } from './jobs';

export type ServerState = 'starting' | 'running' | 'reconnecting' | 'failed' | 'stopped';

export interface StatusInput {
  server: ServerState;
  where: string; // "local" or host:port
  gpu: string | undefined; // from the latest result; unknown until a kernel was measured
  jobs: RunningJob[];
  lastEnded: { kernel: string; message: string } | undefined;
  failure: string | undefined;
}

export interface StatusText {
  text: string;
  tooltip: string;
  /** Which of our commands a click runs. */
  command: 'cudaAgent.showCandidates' | 'cudaAgent.showLog';
  warning: boolean;
}

export function statusText(input: StatusInput): StatusText {
  const server = input.where === 'local' ? 'the local server' : `the server at ${input.where}`;
  switch (input.server) {
    case 'starting':
      return {
        text: '$(loading~spin) CUDA Agent',
        tooltip: `Starting ${server}…`,
        command: 'cudaAgent.showLog',
        warning: false,
      };
    case 'reconnecting':
      return {
        text: '$(debug-disconnect) CUDA Agent: reconnecting',
        tooltip: `The connection to ${input.where} dropped; reconnecting. Click to show the log.`,
        command: 'cudaAgent.showLog',
        warning: true,
      };
    case 'failed':
    case 'stopped':
      return {
        text: '$(error) CUDA Agent: not running',
        tooltip: `${input.failure ?? `${capitalise(server)} is not running.`}\nClick to show the log.`,
        command: 'cudaAgent.showLog',
        warning: true,
      };
    default:
      break;
  }
  const gpu = input.gpu ?? 'GPU not known yet';
  const where = input.where === 'local' ? '' : ` on ${input.where}`;
  if (input.jobs.length > 0) {
    const [job, ...queued] = input.jobs;
    const more = queued.length > 0 ? ` (+${queued.length})` : '';
    return {
      text: `$(sync~spin) ${job.message}${more}`,
      tooltip: `Optimizing ${input.jobs.map((j) => j.kernel).join(', ')} on ${gpu}${where}. Click to show the candidates.`,
      command: 'cudaAgent.showCandidates',
      warning: false,
    };
  }
  const last = input.lastEnded ? `\nLast: ${input.lastEnded.message}` : '';
  return {
    text: `$(chip) ${input.gpu ?? 'CUDA Agent'} · idle`,
    tooltip: `CUDA Agent: idle${input.gpu ? ` · ${input.gpu}` : ''}${where}${last}\nClick to show the candidates.`,
    command: 'cudaAgent.showCandidates',
    warning: false,
  };
}

function capitalise(text: string): string {
  return text.charAt(0).toUpperCase() + text.slice(1);
}
