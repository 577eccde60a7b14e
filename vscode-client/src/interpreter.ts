// Which Python runs `cuda-agent serve`: the setting, else the Python extension's selected interpreter,
// else python3 on PATH (the order of Microsoft's python-tools extension template).

export type InterpreterSource = 'setting' | 'Python extension' | 'PATH';

export interface InterpreterChoice {
  command: string;
  source: InterpreterSource;
}

export interface InterpreterContext {
  setting: string;
  pythonExtension: string | undefined; // the active environment's executable, when that extension is installed
  platform: string; // process.platform
  workspaceFolder: string | undefined;
  home: string;
}

export function chooseInterpreter(context: InterpreterContext): InterpreterChoice {
  const setting = context.setting.trim();
  if (setting !== '') {
    return { command: expandPath(setting, context), source: 'setting' };
  }
  if (context.pythonExtension) {
    return { command: context.pythonExtension, source: 'Python extension' };
  }
  return { command: context.platform === 'win32' ? 'python' : 'python3', source: 'PATH' };
}

/** `~`, `${userHome}` and `${workspaceFolder}`, the variables people write in VS Code path settings. */
export function expandPath(path: string, context: Pick<InterpreterContext, 'workspaceFolder' | 'home'>): string {
  let expanded = path.replace(/\$\{userHome\}/g, context.home);
  if (context.workspaceFolder !== undefined) {
    expanded = expanded.replace(/\$\{workspaceFolder\}/g, context.workspaceFolder);
  }
  if (expanded === '~' || expanded.startsWith('~/')) {
    expanded = context.home + expanded.slice(1);
  }
  return expanded;
}

export function describeInterpreter(choice: InterpreterChoice): string {
  switch (choice.source) {
    case 'setting':
      return `${choice.command} (cudaAgent.interpreter)`;
    case 'Python extension':
      return `${choice.command} (the Python extension's selected interpreter)`;
    default:
      return `${choice.command} (on PATH)`;
  }
}
