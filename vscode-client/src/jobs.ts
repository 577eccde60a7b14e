// The server's running optimizations, as its work-done progress reports them ("Optimizing saxpy", then
// "saxpy: 7 candidates, best 1.27×"): the status bar shows them and Cancel Optimization stops them.

export interface RunningJob {
  token: string;
  kernel: string;
  message: string; // the latest report, or the title until the first one
  percentage: number | undefined;
}

export interface ProgressValue {
  kind: 'begin' | 'report' | 'end';
  title?: string;
  message?: string;
  percentage?: number;
}

const TITLE_PREFIX = 'Optimizing ';

export class JobTracker {
  private readonly jobs = new Map<string, RunningJob>();
  private ended: { kernel: string; message: string } | undefined;

  /** Returns whether the progress was one of ours (an optimization), i.e. whether anything changed. */
  handle(token: string | number, value: ProgressValue): boolean {
    const key = String(token);
    if (value.kind === 'begin') {
      if (!value.title?.startsWith(TITLE_PREFIX)) {
        return false;
      }
      const kernel = value.title.slice(TITLE_PREFIX.length);
      this.jobs.set(key, { token: key, kernel, message: `${value.title}…`, percentage: value.percentage });
      return true;
    }
    const job = this.jobs.get(key);
    if (job === undefined) {
      return false;
    }
    if (value.kind === 'report') {
      job.message = value.message ?? job.message;
      job.percentage = value.percentage ?? job.percentage;
    } else {
      this.jobs.delete(key);
      this.ended = { kernel: job.kernel, message: value.message ?? `${job.kernel}: done` };
    }
    return true;
  }

  running(): RunningJob[] {
    return [...this.jobs.values()];
  }

  /** The last job's closing message (its headline), for the idle status's tooltip. */
  lastEnded(): { kernel: string; message: string } | undefined {
    return this.ended;
  }

  clear(): void {
    this.jobs.clear();
  }
}
