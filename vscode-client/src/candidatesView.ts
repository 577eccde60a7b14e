// "Show Candidates": one webview panel showing a kernel's candidates, redrawn as new results arrive.

import { randomBytes } from 'node:crypto';
import * as vscode from 'vscode';
import { candidatesModel } from './candidates';
import { candidatesHtml, noResultHtml } from './candidatesHtml';
import type { OptimizeResult } from './protocol';
import { isCurrent, type ResultStore } from './results';

export class CandidatesView implements vscode.Disposable {
  private panel: vscode.WebviewPanel | undefined;
  private shown: { uri: string; kernel: string } | undefined;
  private shownCurrent: boolean | undefined;
  private readonly subscriptions: vscode.Disposable[] = [];

  constructor(private readonly results: ResultStore) {
    this.subscriptions.push(
      results.onDidChange((_result, uri, kernel) => {
        if (this.shown?.uri === uri && this.shown.kernel === kernel) {
          this.render();
        }
      }),
      vscode.workspace.onDidChangeTextDocument((event) => {
        const result = this.shown && this.results.get(this.shown.uri, this.shown.kernel);
        if (
          result !== undefined &&
          event.document.uri.toString() === result.uri &&
          this.isCurrent(result) !== this.shownCurrent
        ) {
          this.render(); // the result no longer describes the text (or does again, after an undo)
        }
      }),
    );
  }

  show(result: OptimizeResult): void {
    this.shown = { uri: result.uri, kernel: result.kernel };
    if (this.panel === undefined) {
      this.panel = vscode.window.createWebviewPanel(
        'cudaAgent.candidates',
        'Candidates',
        { viewColumn: vscode.ViewColumn.Beside, preserveFocus: true },
        { enableScripts: true, localResourceRoots: [] },
      );
      this.panel.onDidDispose(() => {
        this.panel = undefined;
        this.shown = undefined;
      });
      this.panel.webview.onDidReceiveMessage((message: { command?: string }) => this.onMessage(message));
    } else {
      this.panel.reveal(undefined, true);
    }
    this.render();
  }

  private render(): void {
    const shown = this.shown;
    const result = shown && this.results.get(shown.uri, shown.kernel);
    if (this.panel === undefined || shown === undefined) {
      return;
    }
    if (result === undefined) {
      this.shownCurrent = undefined;
      this.panel.webview.html = noResultHtml(shown.kernel);
      return;
    }
    this.shownCurrent = this.isCurrent(result);
    this.panel.title = `${result.kernel}: candidates`;
    this.panel.webview.html = candidatesHtml(candidatesModel(result), {
      nonce: randomBytes(16).toString('base64'),
      cspSource: this.panel.webview.cspSource,
      current: this.shownCurrent,
    });
  }

  private isCurrent(result: OptimizeResult): boolean {
    const document = vscode.workspace.textDocuments.find((d) => d.uri.toString() === result.uri);
    return document !== undefined && isCurrent(result, document.version);
  }

  private onMessage(message: { command?: string }): void {
    const shown = this.shown;
    if (shown === undefined) {
      return;
    }
    const commands: Record<string, string> = {
      apply: 'cudaAgent.applyVerifiedRewrite',
      reject: 'cudaAgent.rejectSuggestion',
      diff: 'cudaAgent.previewRewrite',
      transcript: 'cudaAgent.showLlmTranscript',
    };
    const command = message.command && commands[message.command];
    if (command) {
      void vscode.commands.executeCommand(command, shown.uri, shown.kernel);
    }
  }

  dispose(): void {
    this.panel?.dispose();
    for (const subscription of this.subscriptions) {
      subscription.dispose();
    }
  }
}
