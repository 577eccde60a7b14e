// The latest `cudaAgent/result` of each kernel, per document: what the status bar and the candidates view
// show. The server decides what a result is; this only keeps the newest one.

import type { OptimizeResult } from './protocol';

type Listener = (result: OptimizeResult | undefined, uri: string, kernel: string) => void;

export class ResultStore {
  private readonly results = new Map<string, OptimizeResult>();
  private readonly listeners = new Set<Listener>();
  private newest: OptimizeResult | undefined;

  update(result: OptimizeResult): void {
    const key = keyOf(result.uri, result.kernel);
    const kept = this.results.get(key);
    if (kept !== undefined && kept.version > result.version) {
      return; // a late result for older text
    }
    this.results.set(key, result);
    this.newest = result;
    this.emit(result, result.uri, result.kernel);
  }

  get(uri: string, kernel: string): OptimizeResult | undefined {
    return this.results.get(keyOf(uri, kernel));
  }

  /** The document's results, in the order of their kernels' first results. */
  forDocument(uri: string): OptimizeResult[] {
    return [...this.results.values()].filter((result) => result.uri === uri);
  }

  /** The result that arrived last (any document), e.g. for a status bar click with no CUDA editor open. */
  latest(): OptimizeResult | undefined {
    return this.newest;
  }

  /** A rejected suggestion: the server forgot it, so do we. */
  remove(uri: string, kernel: string): void {
    const key = keyOf(uri, kernel);
    if (this.results.delete(key)) {
      if (this.newest?.uri === uri && this.newest.kernel === kernel) {
        this.newest = undefined;
      }
      this.emit(undefined, uri, kernel);
    }
  }

  /** A closed document, or a restarted server: its results are gone there too. */
  clear(uri?: string): void {
    for (const result of [...this.results.values()]) {
      if (uri === undefined || result.uri === uri) {
        this.remove(result.uri, result.kernel);
      }
    }
  }

  onDidChange(listener: Listener): { dispose(): void } {
    this.listeners.add(listener);
    return { dispose: () => this.listeners.delete(listener) };
  }

  private emit(result: OptimizeResult | undefined, uri: string, kernel: string): void {
    for (const listener of this.listeners) {
      listener(result, uri, kernel);
    }
  }
}

/** Whether a result still describes the document's text (results belong to one version). */
export function isCurrent(result: OptimizeResult, documentVersion: number): boolean {
  return result.version === documentVersion;
}

function keyOf(uri: string, kernel: string): string {
  return `${uri}\n${kernel}`;
}
