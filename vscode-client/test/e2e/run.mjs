// End-to-end test of the packaged extension in a real VS Code: code-server (VS Code in a browser) with the
// built .vsix installed, driven through Chromium by playwright-core. The language server is the real one
// (`python -m cuda_agent serve`, started by the extension); only its GPU worker is replaced by a recording
// (CUDA_AGENT_RECORDED_WORKER, set in code-server's environment: the extension passes its environment on).
//
// It opens examples/elementwise.cu, waits for the ▶ Optimize lens, runs "CUDA Agent: Optimize Kernel" on
// saxpy, waits for the verified rewrite (lens, diagnostic, status bar), screenshots it, opens the candidates
// view, rejects it with a reason from the quick pick that follows Reject (the workspace's feedback log keeps
// the reason), optimizes again, applies the rewrite through the refactor preview, and checks the saved file:
// block = [128] → [256], and the log's "accepted" record.
// Then it reads VS Code's own activation time (Running Extensions), points cudaAgent.interpreter at a Python
// without the server (the message, its "Show Log"), and cudaAgent.server.address at a `serve --tcp --token`
// (refused without the token, connected with it, reconnected after that server restarts).
// Prints one line `E2E_RESULT {json}` with the timings; exits non-zero on any failure (with a screenshot).
//
// Environment (all optional): CODE_SERVER, CHROMIUM, VSIX, CUDA_AGENT_PYTHON, E2E_ARTIFACTS, E2E_KEEP=1.

import { spawn, spawnSync } from 'node:child_process';
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const here = path.dirname(fileURLToPath(import.meta.url));
const client = path.resolve(here, '..', '..');
const repo = path.resolve(client, '..');
const config = {
  codeServer:
    process.env.CODE_SERVER ?? path.join(client, '.e2e', 'code-server', 'node_modules', '.bin', 'code-server'),
  chromium: process.env.CHROMIUM ?? which('chromium') ?? which('chromium-browser') ?? '/usr/bin/chromium',
  vsix: process.env.VSIX ?? path.join(client, 'cuda-agent.vsix'),
  python: process.env.CUDA_AGENT_PYTHON ?? path.join(repo, '.venv', 'bin', 'python'),
  artifacts: process.env.E2E_ARTIFACTS ?? path.join(client, 'test-artifacts'),
  recording: path.join(repo, 'tests', 'recordings', 'elementwise_h200.json'),
  example: path.join(repo, 'examples', 'elementwise.cu'),
};
const HEADLINE = 'saxpy: verified rewrite 1.27× faster (0.083 ms → 0.065 ms, NVIDIA H200, 5 input sets, 2 sizes)';
const STEP_TIMEOUT_MS = 60_000;
const started = Date.now();
const steps = [];

function which(name) {
  const found = spawnSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' });
  return found.status === 0 ? found.stdout.trim() : undefined;
}

function step(name) {
  const seconds = ((Date.now() - started) / 1000).toFixed(1);
  steps.push({ name, at_s: Number(seconds) });
  console.log(`[e2e ${seconds.padStart(5)} s] ${name}`);
}

function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

async function waitForHttp(url, timeoutMs, process) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (process.exitCode !== null) {
      throw new Error(`code-server exited with ${process.exitCode}`);
    }
    try {
      const response = await fetch(url);
      if (response.ok) {
        return;
      }
    } catch {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  throw new Error(`${url} did not answer within ${timeoutMs / 1000} s`);
}

/** Files under `dir` whose name is `name`, depth first (VS Code's log folders are dated). */
function findFiles(dir, name, found = []) {
  if (!existsSync(dir)) {
    return found;
  }
  for (const entry of readdirSync(dir)) {
    const full = path.join(dir, entry);
    if (statSync(full).isDirectory()) {
      findFiles(full, name, found);
    } else if (entry === name) {
      found.push(full);
    }
  }
  return found;
}

async function main() {
  for (const [what, file] of Object.entries({
    'code-server': config.codeServer,
    chromium: config.chromium,
    vsix: config.vsix,
    python: config.python,
  })) {
    if (!existsSync(file)) {
      throw new Error(`${what} not found at ${file}`);
    }
  }
  mkdirSync(config.artifacts, { recursive: true });
  rmSync(path.join(config.artifacts, 'e2e-failure.png'), { force: true }); // from an earlier run
  const scratch = mkdtempSync(path.join(tmpdir(), 'cuda-agent-e2e-'));
  const userData = path.join(scratch, 'user-data');
  const extensions = path.join(scratch, 'extensions');
  const workspace = path.join(scratch, 'workspace');
  mkdirSync(path.join(userData, 'User'), { recursive: true });
  mkdirSync(workspace, { recursive: true });
  const file = path.join(workspace, 'elementwise.cu');
  cpSync(config.example, file);
  writeFileSync(
    path.join(userData, 'User', 'settings.json'),
    JSON.stringify(
      {
        'cudaAgent.interpreter': config.python,
        'workbench.startupEditor': 'none',
        'workbench.tips.enabled': false,
        'workbench.enableExperiments': false,
        'workbench.colorTheme': 'Default Dark Modern',
        'security.workspace.trust.enabled': false,
        'telemetry.telemetryLevel': 'off',
        'update.mode': 'none',
        'extensions.autoCheckUpdates': false,
        'extensions.autoUpdate': false,
        'extensions.ignoreRecommendations': true,
        'chat.commandCenter.enabled': false,
        'editor.minimap.enabled': false,
        'files.autoSave': 'off',
        'window.zoomLevel': 0,
      },
      null,
      2,
    ),
  );

  step('installing the .vsix into code-server');
  const install = spawnSync(
    config.codeServer,
    ['--install-extension', config.vsix, '--extensions-dir', extensions, '--user-data-dir', userData],
    { encoding: 'utf8', timeout: 120_000 },
  );
  if (install.status !== 0 || !/was successfully installed/.test(install.stdout + install.stderr)) {
    throw new Error(`installing the .vsix failed:\n${install.stdout}\n${install.stderr}`);
  }

  const port = await freePort();
  step(`starting code-server on 127.0.0.1:${port}`);
  const serverLog = [];
  const codeServer = spawn(
    config.codeServer,
    [
      '--auth',
      'none',
      '--bind-addr',
      `127.0.0.1:${port}`,
      '--disable-telemetry',
      '--disable-update-check',
      '--disable-workspace-trust',
      '--disable-getting-started-override',
      '--extensions-dir',
      extensions,
      '--user-data-dir',
      userData,
      workspace,
    ],
    {
      detached: true, // its own process group: ending it ends the extension host and the language server
      env: {
        ...process.env,
        CUDA_AGENT_RECORDED_WORKER: config.recording,
        CUDA_AGENT_CACHE_DIR: path.join(scratch, 'cache'),
        XDG_DATA_HOME: path.join(scratch, 'xdg-data'),
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  codeServer.stdout.on('data', (data) => serverLog.push(String(data)));
  codeServer.stderr.on('data', (data) => serverLog.push(String(data)));

  let browser;
  let page;
  try {
    await waitForHttp(`http://127.0.0.1:${port}/healthz`, 60_000, codeServer);
    browser = await chromium.launch({
      executablePath: config.chromium,
      headless: true,
      args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--disable-background-networking'],
    });
    const context = await browser.newContext({ viewport: { width: 1500, height: 920 } });
    page = await context.newPage();
    page.setDefaultTimeout(STEP_TIMEOUT_MS);
    step('opening the workspace');
    await page.goto(`http://127.0.0.1:${port}/?folder=${encodeURIComponent(workspace)}`);
    await page.locator('.monaco-workbench').waitFor();
    const statusBar = page.locator('#workbench\\.parts\\.statusbar');
    await statusBar
      .getByText(/CUDA Agent|idle/)
      .first()
      .waitFor(); // activated (workspaceContains:**/*.cu)

    step('opening elementwise.cu');
    await page.locator('.monaco-workbench').click({ position: { x: 700, y: 400 } });
    await page.keyboard.press('Control+P');
    await page.locator('.quick-input-widget input').fill('elementwise.cu');
    await page.locator('.quick-input-list .monaco-list-row', { hasText: 'elementwise.cu' }).first().waitFor();
    await page.keyboard.press('Enter');
    const editor = page.locator('.editor-instance .monaco-editor').first();
    await editor.locator('.view-lines', { hasText: 'saxpy' }).waitFor();

    step('waiting for the ▶ Optimize lens');
    await editor.locator('.codelens-decoration a', { hasText: '▶ Optimize' }).first().waitFor();

    step('running "CUDA Agent: Optimize Kernel" on saxpy');
    await goToLine(page, 30); // `__global__ void saxpy(…)`
    await runCommand(page, 'CUDA Agent: Optimize Kernel');

    step('waiting for the verified rewrite');
    await editor.locator('.codelens-decoration', { hasText: '1.27× verified' }).first().waitFor({ timeout: 120_000 });
    await editor.locator('.codelens-decoration a', { hasText: 'Apply' }).first().waitFor();
    await statusBar
      .getByText(/NVIDIA H200/)
      .first()
      .waitFor();
    await runCommand(page, 'Notifications: Clear All Notifications');
    await page.keyboard.press('Control+Shift+M'); // the Problems panel: the diagnostic, in words
    const problem = page.locator('.markers-panel .monaco-list-row', { hasText: HEADLINE.slice(0, 40) });
    await problem.first().waitFor();
    const problemText = (await problem.first().innerText()).replace(/\s+/g, ' ');
    await goToLine(page, 30, 17); // on the kernel's name, where the diagnostic is
    await page.keyboard.press('Control+.'); // the code actions: "Apply verified rewrite: 1.27× faster"
    const action = page.locator('.action-widget', { hasText: 'Apply verified rewrite: 1.27× faster' });
    await action.first().waitFor();
    const screenshot = path.join(config.artifacts, 'editor-with-rewrite.png');
    await page.screenshot({ path: screenshot });
    await page.keyboard.press('Escape');

    step('showing the candidates');
    await runCommand(page, 'CUDA Agent: Show Candidates');
    const webview = page.frameLocator('iframe.webview.ready').frameLocator('#active-frame');
    await webview.getByText('Time per candidate').waitFor();
    const candidateRows = await webview.locator('tbody tr').count();
    await webview.locator('svg.chart rect.best').waitFor();
    await page.screenshot({ path: path.join(config.artifacts, 'candidates.png') });

    step('rejecting the suggestion with a reason from the quick pick after Reject');
    await editor.click({ position: { x: 300, y: 200 } }); // the .cu editor active again
    await goToLine(page, 30);
    const reasonsOffered = await rejectWithReason(page, 'changes numerics I care about');
    await editor.locator('.codelens-decoration', { hasText: '1.27× verified' }).first().waitFor({ state: 'detached' });
    const feedbackLog = path.join(workspace, '.cuda-agent', 'feedback.jsonl');
    await waitFor(
      () => feedbackRecords(feedbackLog).some((r) => r.event === 'rejected'),
      20_000,
      'the reject in the feedback log',
    );

    step('optimizing saxpy again: the rewrite is back');
    await runCommand(page, 'CUDA Agent: Optimize Kernel');
    await editor.locator('.codelens-decoration', { hasText: '1.27× verified' }).first().waitFor({ timeout: 120_000 });

    step('applying the rewrite through the refactor preview');
    await editor.click({ position: { x: 300, y: 200 } }); // the .cu editor active again
    await goToLine(page, 30);
    await runCommand(page, 'CUDA Agent: Apply Verified Rewrite');
    // The side-by-side diff, titled with the speedup and the assumptions, and the refactor preview, where a
    // change that needs confirmation starts unticked: tick it, then Apply.
    const diffTab = page.locator('.tabs-container .tab', { hasText: '1.27× faster, verified on NVIDIA H200' });
    await diffTab.first().waitFor();
    const diffTitle = (await diffTab.first().getAttribute('aria-label')) ?? '';
    const refactorPreview = page.locator('.bulk-edit-panel');
    await refactorPreview.locator('.monaco-list-row', { hasText: 'elementwise.cu' }).first().waitFor();
    await page.locator('.editor-instance .monaco-diff-editor').first().waitFor();
    await page.screenshot({ path: path.join(config.artifacts, 'refactor-preview.png') });
    await refactorPreview.locator('.edit-checkbox').first().click();
    await refactorPreview.locator('.buttons .monaco-button', { hasText: /^Apply$/ }).click();
    await diffTab.first().waitFor({ state: 'detached' }); // closed once applied
    await editor.locator('.view-lines', { hasText: 'block = [256]' }).waitFor();

    step('saving and checking the file');
    await editor.click({ position: { x: 300, y: 200 } });
    await page.keyboard.press('Control+S');
    await waitFor(
      () => readFileSync(file, 'utf8').includes('block = [256]'),
      20_000,
      'the saved file to hold block = [256]',
    );
    const text = readFileSync(file, 'utf8');
    if (text.includes('block = [128]')) {
      throw new Error('the saved file still has block = [128]');
    }
    // Accepted once the text became the rewrite (not when the preview resolved the edit).
    await waitFor(
      () => feedbackRecords(feedbackLog).some((r) => r.event === 'accepted'),
      20_000,
      'the accept in the feedback log',
    );
    const decisions = feedbackRecords(feedbackLog)
      .filter((r) => r.event !== 'shown')
      .map((r) => ({ event: r.event, reason: r.reason ?? null }));

    step("VS Code's own activation time (Developer: Show Running Extensions)");
    const vscodeActivation = await runningExtensionsActivation(page);

    step('a Python without the server: the message says what to do');
    const failure = await pythonWithoutServer(page, scratch);

    step('a headless server over TCP with a token: refused without it, then connected, then reconnected');
    const remote = await remoteServer(page, scratch, file);

    const timing = activationTiming(userData);
    const result = {
      ok: true,
      duration_s: Number(((Date.now() - started) / 1000).toFixed(1)),
      activation_ms: timing.activation_ms,
      vscode_activation: vscodeActivation, // e.g. "Startup Activation: 49ms"
      vscode_activation_ms: Number(/(\d+(?:\.\d+)?)\s*ms/.exec(vscodeActivation)?.[1] ?? NaN),
      server_ready_ms: timing.server_ready_ms,
      vsix_bytes: statSync(config.vsix).size,
      candidates_listed: candidateRows,
      reject_reasons_offered: reasonsOffered,
      feedback_decisions: decisions,
      diff_title: diffTitle,
      not_installed_message: failure,
      remote,
      problem: problemText,
      screenshot,
      steps,
    };
    step('passed');
    console.log(`E2E_RESULT ${JSON.stringify(result)}`);
  } catch (error) {
    if (page) {
      await page.screenshot({ path: path.join(config.artifacts, 'e2e-failure.png') }).catch(() => undefined);
    }
    console.error(`code-server output:\n${serverLog.join('').slice(-4000)}`);
    for (const log of findFiles(path.join(userData, 'logs'), 'CUDA Agent.log')) {
      console.error(`--- ${log}\n${readFileSync(log, 'utf8').slice(-6000)}`);
    }
    throw error;
  } finally {
    await browser?.close().catch(() => undefined);
    try {
      process.kill(-codeServer.pid, 'SIGTERM');
    } catch {
      // already gone
    }
    if (!process.env.E2E_KEEP) {
      await new Promise((resolve) => setTimeout(resolve, 500));
      rmSync(scratch, { recursive: true, force: true, maxRetries: 3 });
    } else {
      console.log(`kept ${scratch}`);
    }
  }
}

/** "CUDA Agent: Reject Suggestion" on the kernel under the cursor, then `reason` in the quick pick that
 * follows; the labels the pick offered. */
async function rejectWithReason(page, reason) {
  await page.keyboard.press('F1');
  await page.locator('.quick-input-widget input').fill('>CUDA Agent: Reject Suggestion');
  await page
    .locator('.quick-input-list .monaco-list-row', { hasText: 'CUDA Agent: Reject Suggestion' })
    .first()
    .waitFor();
  await page.keyboard.press('Enter');
  const row = page.locator('.quick-input-list .monaco-list-row', { hasText: reason });
  await row.first().waitFor();
  const offered = (await page.locator('.quick-input-list .monaco-list-row .label-name').allInnerTexts()).map((t) =>
    t.trim(),
  );
  await row.first().click();
  await page.locator('.quick-input-widget').waitFor({ state: 'hidden' });
  return offered;
}

/** The suggestion records of a feedback log (the candidates' samples, which carry a `kind`, left out). */
function feedbackRecords(log) {
  if (!existsSync(log)) {
    return [];
  }
  return readFileSync(log, 'utf8')
    .split('\n')
    .filter((line) => line.trim())
    .map((line) => JSON.parse(line))
    .filter((record) => record.kind === undefined && record.event !== undefined);
}

/** What VS Code measured for the extension's activation (loading its code and calling activate()). */
async function runningExtensionsActivation(page) {
  await runCommand(page, 'Developer: Show Running Extensions');
  const row = page.locator('.runtime-extensions-editor .extension', { hasText: 'CUDA Agent' });
  const time = row.first().locator('.activation-time');
  await time.waitFor();
  await page.waitForFunction((element) => /\d/.test(element.textContent ?? ''), await time.elementHandle());
  const text = (await time.innerText()).trim();
  await page.keyboard.press('Control+W');
  await page.locator('.runtime-extensions-editor').waitFor({ state: 'detached' });
  return text;
}

/**
 * Points cudaAgent.interpreter at a Python without cuda-agent, expects the explanation with its
 * "Show Log" button, follows it to the log, then restores the setting and expects the server back.
 */
async function pythonWithoutServer(page, scratch) {
  // A fresh virtual environment: a real Python, without cuda-agent.
  const bare = path.join(scratch, 'bare-venv');
  const venv = spawnSync(config.python, ['-m', 'venv', '--without-pip', bare], { encoding: 'utf8' });
  if (venv.status !== 0) {
    throw new Error(`creating a virtual environment failed: ${venv.stderr}`);
  }
  const python = path.join(bare, 'bin', 'python');
  await setInterpreter(page, python); // a change of the interpreter restarts the server
  const toast = page.locator('.notification-toast', { hasText: 'the server is not installed' });
  await toast.first().waitFor();
  const message = (await toast.first().locator('.notification-list-item-message').innerText()).trim();
  if (!message.includes(`${python} -m pip install cuda-agent`)) {
    throw new Error(`the message does not say how to install the server: ${message}`);
  }
  const statusBar = page.locator('#workbench\\.parts\\.statusbar');
  await statusBar.getByText('CUDA Agent: not running').waitFor();
  await page.screenshot({ path: path.join(config.artifacts, 'server-not-installed.png') });
  await toast.first().getByRole('button', { name: 'Show Log' }).click();
  await page.locator('.output-view .view-lines', { hasText: 'the server is not installed' }).waitFor(); // the log, at its end
  await setInterpreter(page, config.python); // back to the venv: the server comes back
  await statusBar.getByText(/NVIDIA H200 · idle|CUDA Agent · idle/).waitFor();
  return message;
}

/**
 * `cuda-agent serve --tcp --token …` (as on a GPU box behind an SSH tunnel): cudaAgent.server.address alone
 * is refused with a message naming the token setting; with the token the editor connects; when the server
 * goes away the status says so, and when it is back on the same port the editor reconnects by itself.
 */
async function remoteServer(page, scratch, file) {
  const token = `e2e-${Date.now()}`;
  let server = await startTcpServer(scratch, token, 0);
  const address = `127.0.0.1:${server.port}`;
  const statusBar = page.locator('#workbench\\.parts\\.statusbar');
  try {
    await setSetting(page, 'cudaAgent.server', 'of a headless server', address);
    const refused = page.locator('.notification-toast', { hasText: 'refused this client' });
    await refused.first().waitFor();
    const refusedMessage = (await refused.first().locator('.notification-list-item-message').innerText()).trim();
    await runCommand(page, 'Notifications: Clear All Notifications');
    await setSetting(page, 'cudaAgent.server', 'Token the remote server', token);
    await statusBar.getByText(/· idle/).waitFor();
    await page.locator('.codelens-decoration a:visible', { hasText: 'Optimize' }).first().waitFor(); // from the remote server

    server.process.kill('SIGTERM'); // the connection drops
    await server.exited;
    await statusBar.getByText('CUDA Agent: reconnecting').waitFor();
    await page.screenshot({ path: path.join(config.artifacts, 'reconnecting.png') });
    server = await startTcpServer(scratch, token, server.port);
    await statusBar.getByText(/· idle/).waitFor({ timeout: 45_000 }); // the backoff is at most 30 s
    await runCommand(page, 'CUDA Agent: Optimize Kernel'); // answered by the new session: a result names the GPU
    await statusBar.getByText('NVIDIA H200 · idle').waitFor();
    return { address, refused: refusedMessage, reconnected: true, file: path.basename(file) };
  } finally {
    server.process.kill('SIGTERM');
  }
}

function startTcpServer(scratch, token, port) {
  const child = spawn(
    config.python,
    ['-m', 'cuda_agent', 'serve', '--tcp', '--host', '127.0.0.1', '--port', String(port), '--token', token],
    {
      env: {
        ...process.env,
        CUDA_AGENT_RECORDED_WORKER: config.recording,
        CUDA_AGENT_CACHE_DIR: path.join(scratch, 'remote-cache'),
        XDG_DATA_HOME: path.join(scratch, 'xdg-data'),
      },
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
  const exited = new Promise((resolve) => child.once('exit', resolve));
  return new Promise((resolve, reject) => {
    let said = '';
    const timer = setTimeout(() => reject(new Error(`the TCP server did not start: ${said}`)), 30_000);
    child.stderr.on('data', (data) => {
      said += String(data);
      const listening = /listening on [\d.]+:(\d+)/.exec(said);
      if (listening) {
        clearTimeout(timer);
        resolve({ process: child, port: Number(listening[1]), exited });
      }
    });
    child.once('exit', (code) => reject(new Error(`the TCP server exited (${code}): ${said}`)));
  });
}

/** Sets one of our string settings in the Settings editor, as a user would: the row is found by its
 * description. */
async function setSetting(page, key, description, value) {
  await runCommand(page, 'Preferences: Open User Settings');
  const settings = page.locator('.settings-editor');
  await settings.waitFor();
  await page.keyboard.type(key);
  const input = settings.locator('.setting-item-contents', { hasText: description }).locator('input');
  await input.first().waitFor();
  await input.first().fill(value);
  await input.first().press('Tab'); // commits the value
  await page.keyboard.press('Control+W'); // closes the Settings editor
  await settings.waitFor({ state: 'detached' });
}

function setInterpreter(page, value) {
  return setSetting(page, 'cudaAgent.interpreter', 'Python interpreter that runs', value);
}

/** The extension logs its own activation time and when its server answered (extension.ts). */
function activationTiming(userData) {
  const logs = findFiles(path.join(userData, 'logs'), 'CUDA Agent.log');
  const text = logs.map((log) => readFileSync(log, 'utf8')).join('\n');
  const activation = /Activated in ([\d.]+) ms/.exec(text);
  const ready = /Server ready (\d+) ms after activation started/.exec(text);
  if (!activation || !ready) {
    throw new Error(`no activation timing in the extension's log (${logs.join(', ') || 'no log file'})`);
  }
  return { activation_ms: Number(activation[1]), server_ready_ms: Number(ready[1]) };
}

async function goToLine(page, line, column) {
  await page.keyboard.press('Control+G');
  await page.locator('.quick-input-widget input').fill(column ? `:${line}:${column}` : `:${line}`);
  await page.keyboard.press('Enter');
  await page.locator('.quick-input-widget').waitFor({ state: 'hidden' });
}

async function runCommand(page, label) {
  await page.keyboard.press('F1');
  const input = page.locator('.quick-input-widget input');
  await input.fill(`>${label}`);
  await page.locator('.quick-input-list .monaco-list-row', { hasText: label }).first().waitFor();
  await page.keyboard.press('Enter');
  await page.locator('.quick-input-widget').waitFor({ state: 'hidden' });
}

async function waitFor(condition, timeoutMs, what) {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${what}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

main().then(
  () => process.exit(0),
  (error) => {
    console.error(`E2E_FAILED ${error instanceof Error ? error.stack : error}`);
    process.exit(1);
  },
);
