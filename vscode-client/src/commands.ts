// The palette and context-menu commands. Each finds the kernel it is about (from its arguments, else the
// cursor, else by asking) and asks the server to act: the server owns every decision and edit.

import * as vscode from 'vscode';
import type { CandidatesView } from './candidatesView';
import type { JobTracker } from './jobs';
import { kernelAtLine, kernelsFromLenses } from './kernels';
import {
  type OptimizeAnswer,
  type OptimizeResult,
  type RejectReason,
  ServerCommands,
  type TranscriptAnswer,
} from './protocol';
import { reasonChoices, reasonFromArguments, rejectArguments } from './rejectReason';
import { isCurrent, type ResultStore } from './results';
import type { RewritePreview } from './rewritePreview';
import { llmKeySecret, type ServerConnection } from './server';
import { LLM_KEY_ENV, readClientSettings, SECTION } from './settings';

interface Target {
  uri: string;
  kernel: string;
}

export interface CommandContext {
  extension: vscode.ExtensionContext;
  server: ServerConnection;
  results: ResultStore;
  jobs: JobTracker;
  candidates: CandidatesView;
  preview: RewritePreview;
  log: vscode.LogOutputChannel;
}

export function registerCommands(c: CommandContext): vscode.Disposable[] {
  const register = (id: string, run: (...args: unknown[]) => Promise<void> | void): vscode.Disposable =>
    vscode.commands.registerCommand(id, async (...args: unknown[]) => {
      try {
        await run(...args);
      } catch (error) {
        c.log.error(`${id} failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
        void vscode.window
          .showErrorMessage(`CUDA Agent: ${error instanceof Error ? error.message : String(error)}`, 'Show Log')
          .then((choice) => choice && c.log.show());
      }
    });

  return [
    register('cudaAgent.optimizeKernel', async (...args) => {
      const target = await chooseKernel(c, args);
      if (target === undefined) {
        return;
      }
      // The server says what became of it (window/showMessage), whatever the client: nothing to add here.
      await c.server.executeCommand<OptimizeAnswer>(ServerCommands.optimize, [target.uri, target.kernel]);
    }),

    register('cudaAgent.applyVerifiedRewrite', async (...args) => {
      const result = await chooseRewrite(c, args);
      if (result === undefined) {
        return;
      }
      // The rewrite side by side with the file, titled with the speedup and the assumptions; then the server's
      // workspace/applyEdit, whose change annotation asks for confirmation: VS Code's refactor preview, where
      // the user ticks the change and applies it (or discards it).
      await c.preview.show(result);
      try {
        // A rewrite not applied is said by the server (window/showMessage), with the reason.
        await c.server.executeCommand<{ applied: boolean; reason: string }>(ServerCommands.applyRewrite, [
          result.uri,
          result.kernel,
        ]);
      } finally {
        await c.preview.close(result);
      }
    }),

    register('cudaAgent.previewRewrite', async (...args) => {
      const result = await chooseRewrite(c, args);
      if (result !== undefined) {
        await c.preview.show(result);
      }
    }),

    register('cudaAgent.rejectSuggestion', async (...args) => {
      const result = await chooseRewrite(c, args);
      if (result === undefined) {
        return;
      }
      // Why, in one click and optional: the feedback log keeps it with the reject, as training data.
      const reason = reasonFromArguments(args) ?? (await askRejectReason(result.kernel));
      const answer = await c.server.executeCommand<{ rejected: boolean }>(
        ServerCommands.rejectRewrite,
        rejectArguments(result.uri, result.kernel, reason),
      );
      if (answer?.rejected) {
        c.results.remove(result.uri, result.kernel);
      }
    }),

    register('cudaAgent.showCandidates', async (...args) => {
      const result = await chooseResult(c, args);
      if (result !== undefined) {
        c.candidates.show(result);
      }
    }),

    register('cudaAgent.showLlmTranscript', async (...args) => {
      const result = await chooseResult(c, args);
      if (result === undefined || !ensureRunning(c)) {
        return;
      }
      const answer = await c.server.executeCommand<TranscriptAnswer>(ServerCommands.showTranscript, [
        result.uri,
        result.kernel,
      ]);
      if (!answer?.found || !answer.markdown) {
        void vscode.window.showInformationMessage(
          `CUDA Agent: ${answer?.reason ?? `no LLM session behind ${result.kernel}'s result`}.`,
        );
        return;
      }
      const document = await vscode.workspace.openTextDocument({ language: 'markdown', content: answer.markdown });
      await vscode.commands.executeCommand('markdown.showPreview', document.uri);
    }),

    register('cudaAgent.cancel', async (...args) => {
      if (!ensureRunning(c)) {
        return;
      }
      const explicit = targetFromArguments(args);
      const running = c.jobs.running();
      let cancelled = 0;
      if (explicit !== undefined) {
        const answer = await c.server.executeCommand<{ cancelled: boolean }>(ServerCommands.cancelOptimization, [
          explicit.uri,
          explicit.kernel,
        ]);
        cancelled += answer?.cancelled ? 1 : 0;
      }
      // The running search (its progress token), and any queued one of the kernel under the cursor.
      for (const job of running) {
        await c.server.cancelProgress(job.token);
        cancelled++;
      }
      const editor = cudaEditor(args);
      let asked = false; // the server answers a cancel it was sent itself (window/showMessage)
      if (explicit === undefined && editor !== undefined) {
        const kernel = await kernelAtCursor(c, editor);
        if (kernel !== undefined && !running.some((job) => job.kernel === kernel)) {
          const answer = await c.server.executeCommand<{ cancelled: boolean }>(ServerCommands.cancelOptimization, [
            editor.document.uri.toString(),
            kernel,
          ]);
          cancelled += answer?.cancelled ? 1 : 0;
          asked = true;
        }
      }
      if (cancelled === 0 && !asked) {
        void vscode.window.showInformationMessage('CUDA Agent: no optimization is running.');
      }
    }),

    register('cudaAgent.restartServer', () => c.server.restart()),

    register('cudaAgent.showLog', () => c.log.show()),

    register('cudaAgent.setLlmApiKey', async () => {
      const provider = readClientSettings(vscode.workspace.getConfiguration(SECTION)).llmProvider;
      if (!(provider in LLM_KEY_ENV)) {
        void vscode.window.showInformationMessage('CUDA Agent: choose an LLM provider first (cudaAgent.llm.provider).');
        return;
      }
      const key = await vscode.window.showInputBox({
        title: `${provider} API key`,
        prompt:
          "Kept in VS Code's secret storage and sent to the server with its settings " +
          `(else it reads ${LLM_KEY_ENV[provider]}). Empty: forget it.`,
        password: true,
        ignoreFocusOut: true,
      });
      if (key === undefined) {
        return;
      }
      // The server is sent the new key by the secret storage's change event (extension.ts).
      if (key === '') {
        await c.extension.secrets.delete(llmKeySecret(provider));
      } else {
        await c.extension.secrets.store(llmKeySecret(provider), key);
      }
    }),
  ];
}

function targetFromArguments(args: unknown[]): Target | undefined {
  const [uri, kernel] = args;
  return typeof uri === 'string' && typeof kernel === 'string' ? { uri, kernel } : undefined;
}

/** The CUDA editor a command is about: the one the context menu was opened on, else the active one. */
function cudaEditor(args: unknown[]): vscode.TextEditor | undefined {
  const uri = args[0] instanceof vscode.Uri ? args[0].toString() : undefined;
  const editor =
    (uri && vscode.window.visibleTextEditors.find((e) => e.document.uri.toString() === uri)) ||
    vscode.window.activeTextEditor;
  return editor?.document.languageId === 'cuda-cpp' ? editor : undefined;
}

function ensureRunning(c: CommandContext): boolean {
  if (c.server.running !== undefined) {
    return true;
  }
  const why = c.server.failure ? ` ${c.server.failure}` : '';
  void vscode.window
    .showErrorMessage(`CUDA Agent: the server is not running.${why}`, 'Show Log', 'Restart Server')
    .then((choice) => {
      if (choice === 'Show Log') {
        c.log.show();
      } else if (choice === 'Restart Server') {
        void c.server.restart();
      }
    });
  return false;
}

async function kernelAtCursor(c: CommandContext, editor: vscode.TextEditor): Promise<string | undefined> {
  const kernels = kernelsFromLenses(await c.server.codeLenses(editor.document.uri));
  const lines = editor.document.getText().split(/\r?\n/);
  return kernelAtLine(kernels, editor.selection.active.line, lines);
}

async function chooseKernel(c: CommandContext, args: unknown[]): Promise<Target | undefined> {
  const explicit = targetFromArguments(args);
  if (explicit !== undefined) {
    return explicit;
  }
  if (!ensureRunning(c)) {
    return undefined;
  }
  const editor = cudaEditor(args);
  if (editor === undefined) {
    void vscode.window.showInformationMessage(
      'CUDA Agent: open a CUDA file (.cu, .cuh) and put the cursor in a kernel.',
    );
    return undefined;
  }
  const uri = editor.document.uri.toString();
  const kernels = kernelsFromLenses(await c.server.codeLenses(editor.document.uri));
  if (kernels.length === 0) {
    void vscode.window.showInformationMessage('CUDA Agent: this file has no __global__ kernel.');
    return undefined;
  }
  const lines = editor.document.getText().split(/\r?\n/);
  const kernel =
    kernelAtLine(kernels, editor.selection.active.line, lines) ??
    (await vscode.window.showQuickPick(
      kernels.map((k) => k.name),
      { title: 'Which kernel?' },
    ));
  return kernel === undefined ? undefined : { uri, kernel };
}

/** A kernel's latest result: from the arguments, the kernel under the cursor, the file's only one, or asked. */
async function chooseResult(c: CommandContext, args: unknown[]): Promise<OptimizeResult | undefined> {
  const explicit = targetFromArguments(args);
  if (explicit !== undefined) {
    return c.results.get(explicit.uri, explicit.kernel) ?? noResult(explicit.kernel);
  }
  const editor = cudaEditor(args);
  const inFile = editor ? c.results.forDocument(editor.document.uri.toString()) : [];
  if (editor === undefined || inFile.length === 0) {
    const latest = c.results.latest();
    return latest ?? noResult(undefined);
  }
  if (inFile.length === 1) {
    return inFile[0];
  }
  const atCursor = c.server.running ? await kernelAtCursor(c, editor) : undefined;
  const found = inFile.find((result) => result.kernel === atCursor);
  if (found !== undefined) {
    return found;
  }
  const picked = await vscode.window.showQuickPick(
    inFile.map((result) => ({
      label: result.kernel,
      description: result.rewrite ? `${result.rewrite.speedup.toFixed(2)}×` : 'no rewrite',
      result,
    })),
    { title: 'Which kernel?' },
  );
  return picked?.result;
}

/** A result with a verified rewrite that still describes the document's text. */
async function chooseRewrite(c: CommandContext, args: unknown[]): Promise<OptimizeResult | undefined> {
  if (!ensureRunning(c)) {
    return undefined;
  }
  const result = await chooseResult(c, args);
  if (result === undefined) {
    return undefined;
  }
  if (result.rewrite === null) {
    void vscode.window.showInformationMessage(`CUDA Agent: no verified faster rewrite of ${result.kernel} was found.`);
    return undefined;
  }
  const document = vscode.workspace.textDocuments.find((d) => d.uri.toString() === result.uri);
  if (document === undefined || !isCurrent(result, document.version)) {
    void vscode.window.showInformationMessage(
      `CUDA Agent: the text changed since ${result.kernel} was optimized; optimize it again for a rewrite of this text.`,
    );
    return undefined;
  }
  return result;
}

/** The reason for rejecting `kernel`'s suggestion, or undefined when skipped (Escape, or "No reason"). */
async function askRejectReason(kernel: string): Promise<RejectReason | undefined> {
  const choice = await vscode.window.showQuickPick(reasonChoices(), {
    title: `Reject the rewrite of ${kernel}`,
    placeHolder: 'Why? (optional: Escape rejects without a reason)',
  });
  return choice?.reason;
}

function noResult(kernel: string | undefined): undefined {
  const which = kernel ? ` for ${kernel}` : '';
  void vscode.window.showInformationMessage(
    `CUDA Agent: no results${which} yet. Run "CUDA Agent: Optimize Kernel" first.`,
  );
  return undefined;
}
