// The interpreter selected in the Python extension (ms-python.python), when it is installed. Only the
// part of its public API used here is typed; any failure means "no answer", never a failed start.

import * as vscode from 'vscode';

interface EnvironmentPath {
  path: string;
}

interface PythonEnvironmentsApi {
  getActiveEnvironmentPath(resource?: vscode.Uri): EnvironmentPath;
  resolveEnvironment(environment: EnvironmentPath | string): Promise<{ executable: { uri?: vscode.Uri } } | undefined>;
  onDidChangeActiveEnvironmentPath: vscode.Event<unknown>;
}

interface PythonExtensionApi {
  environments?: PythonEnvironmentsApi;
}

const PYTHON_EXTENSION = 'ms-python.python';

async function environments(): Promise<PythonEnvironmentsApi | undefined> {
  const extension = vscode.extensions.getExtension<PythonExtensionApi>(PYTHON_EXTENSION);
  if (extension === undefined) {
    return undefined;
  }
  const api = extension.isActive ? extension.exports : await extension.activate();
  return api?.environments;
}

export async function selectedInterpreter(resource: vscode.Uri | undefined): Promise<string | undefined> {
  try {
    const api = await environments();
    if (api === undefined) {
      return undefined;
    }
    const resolved = await api.resolveEnvironment(api.getActiveEnvironmentPath(resource));
    return resolved?.executable.uri?.fsPath;
  } catch {
    return undefined;
  }
}

/** Calls `listener` when the selected interpreter changes (nothing when the extension is absent). */
export async function onInterpreterChanged(listener: () => void): Promise<vscode.Disposable> {
  try {
    const api = await environments();
    return api?.onDidChangeActiveEnvironmentPath(listener) ?? new vscode.Disposable(() => undefined);
  } catch {
    return new vscode.Disposable(() => undefined);
  }
}
