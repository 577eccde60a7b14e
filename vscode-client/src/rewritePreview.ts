// A verified rewrite as a side-by-side diff against the file, titled with the speedup and the assumptions.
// The rewritten text is served from memory under its own scheme, read-only.

import * as vscode from 'vscode';
import type { OptimizeResult } from './protocol';
import type { ResultStore } from './results';

export const REWRITE_SCHEME = 'cuda-agent-rewrite';

export class RewritePreview implements vscode.TextDocumentContentProvider, vscode.Disposable {
  private readonly registration: vscode.Disposable;

  constructor(private readonly results: ResultStore) {
    this.registration = vscode.workspace.registerTextDocumentContentProvider(REWRITE_SCHEME, this);
  }

  provideTextDocumentContent(uri: vscode.Uri): string {
    const { document, kernel } = JSON.parse(uri.query) as { document: string; kernel: string };
    return this.results.get(document, kernel)?.rewrite?.source ?? '';
  }

  async show(result: OptimizeResult): Promise<void> {
    if (result.rewrite === null) {
      return;
    }
    const original = vscode.Uri.parse(result.uri);
    const name = original.path.split('/').pop() ?? 'kernel';
    const rewritten = vscode.Uri.from({
      scheme: REWRITE_SCHEME,
      path: `/${result.kernel}/${name}`,
      query: queryOf(result),
    });
    await vscode.commands.executeCommand('vscode.diff', original, rewritten, diffTitle(result), { preview: true });
  }

  /** Closes the diff of a kernel's rewrite once it was applied or discarded: it has served. */
  async close(result: OptimizeResult): Promise<void> {
    const tabs = vscode.window.tabGroups.all.flatMap((group) => group.tabs);
    const shown = tabs.filter(
      (tab) =>
        tab.input instanceof vscode.TabInputTextDiff &&
        tab.input.modified.scheme === REWRITE_SCHEME &&
        tab.input.modified.query === queryOf(result),
    );
    if (shown.length > 0) {
      await vscode.window.tabGroups.close(shown);
    }
  }

  dispose(): void {
    this.registration.dispose();
  }
}

function queryOf(result: OptimizeResult): string {
  return JSON.stringify({ document: result.uri, kernel: result.kernel });
}

export function diffTitle(result: OptimizeResult): string {
  const rewrite = result.rewrite!;
  const assumptions = rewrite.assumptions.length > 0 ? rewrite.assumptions.join('; ') : 'nothing beyond the spec';
  return `${result.kernel}: ${rewrite.speedup.toFixed(2)}× faster, verified on ${result.gpu} · assumes ${assumptions}`;
}
