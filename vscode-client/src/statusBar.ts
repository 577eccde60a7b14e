// The status bar item: server state, GPU, the running job or idle; a click shows the candidates (or the
// log when the server is not running).

import * as vscode from 'vscode';
import type { JobTracker } from './jobs';
import type { ResultStore } from './results';
import type { ServerConnection } from './server';
import { statusText } from './statusText';

export class StatusBar implements vscode.Disposable {
  private readonly item: vscode.StatusBarItem;
  private readonly gpus = new Map<string, string>(); // per server (local, host:port): outlives its results

  constructor(
    private readonly server: ServerConnection,
    private readonly jobs: JobTracker,
    private readonly results: ResultStore,
  ) {
    this.item = vscode.window.createStatusBarItem('cudaAgent.status', vscode.StatusBarAlignment.Left, 50);
    this.item.name = 'CUDA Agent';
    this.update();
    this.item.show();
  }

  update(): void {
    const status = statusText({
      server: this.server.state,
      where: this.server.where,
      gpu: this.gpu(),
      jobs: this.jobs.running(),
      lastEnded: this.jobs.lastEnded(),
      failure: this.server.failure,
    });
    this.item.text = status.text;
    this.item.tooltip = status.tooltip;
    this.item.command = status.command;
    this.item.backgroundColor = status.warning ? new vscode.ThemeColor('statusBarItem.warningBackground') : undefined;
  }

  /** The server's GPU, as it announced it (before any result names it). */
  knownGpu(name: string): void {
    this.gpus.set(this.server.where, name);
    this.update();
  }

  private gpu(): string | undefined {
    const latest = this.results.latest()?.gpu;
    if (latest !== undefined) {
      this.gpus.set(this.server.where, latest);
    }
    return this.gpus.get(this.server.where);
  }

  dispose(): void {
    this.item.dispose();
  }
}
