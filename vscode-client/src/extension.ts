// Activation: wires the server connection to the views. Everything the user sees comes from the server.

import { performance } from 'node:perf_hooks';
import * as vscode from 'vscode';
import { CandidatesView } from './candidatesView';
import { registerCommands } from './commands';
import { JobTracker } from './jobs';
import { onInterpreterChanged } from './pythonExtension';
import { ResultStore } from './results';
import { RewritePreview } from './rewritePreview';
import { ServerConnection } from './server';
import { RESTART_SETTINGS, SECTION } from './settings';
import { StatusBar } from './statusBar';

let connection: ServerConnection | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const activationStart = performance.now();
  const log = vscode.window.createOutputChannel('CUDA Agent', { log: true });
  const results = new ResultStore();
  const jobs = new JobTracker();
  let statusBar: StatusBar | undefined;
  let ready = false;

  const server = new ServerConnection(context, log, {
    onState: (state) => {
      if (state !== 'running') {
        // The server's jobs and results went with it (a new session knows neither): nothing left to apply.
        jobs.clear();
        results.clear();
      }
      statusBar?.update();
    },
    onResult: (result) => results.update(result),
    onStatus: (status) => statusBar?.knownGpu(status.gpu ?? 'no GPU'),
    onProgress: (token, value) => {
      if (jobs.handle(token, value)) {
        statusBar?.update();
      }
    },
    onReady: () => {
      if (!ready) {
        ready = true;
        // Read by the end-to-end test; also the number to watch when activation feels slow.
        log.info(`Server ready ${(performance.now() - activationStart).toFixed(0)} ms after activation started`);
      }
    },
  });
  connection = server;
  statusBar = new StatusBar(server, jobs, results);
  const candidates = new CandidatesView(results);
  const preview = new RewritePreview(results);

  context.subscriptions.push(
    log,
    server,
    statusBar,
    candidates,
    preview,
    results.onDidChange(() => statusBar?.update()),
    ...registerCommands({ extension: context, server, results, jobs, candidates, preview, log }),
    context.secrets.onDidChange((event) => {
      if (event.key.startsWith('cudaAgent.llm.')) {
        void server.settingsChanged();
      }
    }),
    vscode.workspace.onDidCloseTextDocument((document) => results.clear(document.uri.toString())),
    vscode.workspace.onDidChangeConfiguration((event) => {
      if (RESTART_SETTINGS.some((setting) => event.affectsConfiguration(setting))) {
        void server.restart();
      } else if (event.affectsConfiguration(SECTION)) {
        void server.settingsChanged();
      }
    }),
  );
  // A new interpreter selected in the Python extension matters only when it is the one in use.
  void onInterpreterChanged(() => {
    if (vscode.workspace.getConfiguration(SECTION).get<string>('interpreter', '').trim() === '') {
      void server.restart();
    }
  }).then((disposable) => context.subscriptions.push(disposable));

  void server.start(); // not awaited: activation must not wait for Python to start
  log.info(`Activated in ${(performance.now() - activationStart).toFixed(1)} ms`);
}

export async function deactivate(): Promise<void> {
  await connection?.stop();
  connection = undefined;
}
