// Turning a failed start or a lost connection into a message that says what to do next.

import { describeInterpreter, type InterpreterChoice } from './interpreter';

export interface LocalFailure {
  mode: 'stdio';
  interpreter: InterpreterChoice;
  error: string; // what the language client reported
  stderr: string[]; // the server process's last stderr lines
}

export interface RemoteFailure {
  mode: 'tcp';
  address: string;
  error: string;
}

export interface Explanation {
  message: string;
  /** Buttons to offer besides "Show Log". */
  openSettings: boolean;
}

export function explainFailure(failure: LocalFailure | RemoteFailure): Explanation {
  return failure.mode === 'stdio' ? explainLocal(failure) : explainRemote(failure);
}

function explainLocal(failure: LocalFailure): Explanation {
  const python = describeInterpreter(failure.interpreter);
  const command = failure.interpreter.command;
  const said = [failure.error, ...failure.stderr].join('\n');
  if (/ENOENT|not found|No such file/i.test(failure.error)) {
    return {
      message:
        `CUDA Agent: the Python interpreter ${python} was not found. ` +
        'Set cudaAgent.interpreter to a Python that has cuda-agent installed.',
      openSettings: true,
    };
  }
  if (/EACCES/.test(failure.error)) {
    return {
      message: `CUDA Agent: ${python} cannot be run (permission denied). Set cudaAgent.interpreter to a Python executable.`,
      openSettings: true,
    };
  }
  if (/No module named '?cuda_agent'?$/m.test(said) || /No module named '?cuda_agent[.']/.test(said)) {
    return {
      message:
        `CUDA Agent: the server is not installed for ${python}. ` +
        `Install it with \`${command} -m pip install cuda-agent\`, or set cudaAgent.interpreter to a Python where it is.`,
      openSettings: true,
    };
  }
  const missing = /No module named '?([\w.]+)'?/.exec(said);
  if (missing) {
    return {
      message:
        `CUDA Agent: a dependency of the server is missing in ${python} (No module named '${missing[1]}'). ` +
        `Reinstall it: \`${command} -m pip install --force-reinstall cuda-agent\`.`,
      openSettings: false,
    };
  }
  const last = lastMeaningfulLine(failure.stderr) ?? failure.error;
  return {
    message: `CUDA Agent: the server did not start with ${python}: ${last}`,
    openSettings: false,
  };
}

function explainRemote(failure: RemoteFailure): Explanation {
  const { address, error } = failure;
  if (/needs a token/.test(error)) {
    return {
      message:
        `CUDA Agent: the server at ${address} refused this client: set cudaAgent.server.token ` +
        '(or CUDA_AGENT_TOKEN) to the token it was started with.',
      openSettings: true,
    };
  }
  if (/ECONNREFUSED/.test(error)) {
    return {
      message:
        `CUDA Agent: nothing listens on ${address}. On the GPU box run \`cuda-agent serve --tcp\`, and reach it ` +
        'through an SSH tunnel (`ssh -N -L 2087:localhost:2087 gpu-box`). Retrying in the background.',
      openSettings: true,
    };
  }
  if (/ENOTFOUND|EAI_AGAIN/.test(error)) {
    return {
      message: `CUDA Agent: the host of ${address} is unknown. Check cudaAgent.server.address.`,
      openSettings: true,
    };
  }
  if (/ETIMEDOUT|EHOSTUNREACH|ENETUNREACH/.test(error)) {
    return {
      message: `CUDA Agent: ${address} cannot be reached (${error}). Retrying in the background.`,
      openSettings: true,
    };
  }
  return { message: `CUDA Agent: the connection to ${address} failed: ${error}`, openSettings: true };
}

function lastMeaningfulLine(lines: string[]): string | undefined {
  for (let i = lines.length - 1; i >= 0; i--) {
    const line = lines[i].trim();
    if (line !== '' && !line.startsWith('File "') && line !== 'Traceback (most recent call last):') {
      return line;
    }
  }
  return undefined;
}

/** The server logs "cuda-agent LEVEL: message" on stderr; anything else (a traceback) keeps the previous
 * line's level, and before any such line it is an error (Python failing to start). */
export type LogLevel = 'debug' | 'info' | 'warn' | 'error';

export function stderrLevel(line: string, previous: LogLevel | undefined): LogLevel {
  const match = /^cuda-agent (DEBUG|INFO|WARNING|ERROR|CRITICAL):/.exec(line);
  if (!match) {
    return previous ?? 'error';
  }
  switch (match[1]) {
    case 'DEBUG':
      return 'debug';
    case 'INFO':
      return 'info';
    case 'WARNING':
      return 'warn';
    default:
      return 'error';
  }
}
