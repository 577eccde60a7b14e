// Which kernel a command without arguments is about. The server names each kernel in the arguments of the
// code lenses it puts on the kernel's first line ([uri, kernelName]); the client keeps no parser of its own.

export interface LensLike {
  range: { start: { line: number } };
  command?: { command: string; arguments?: unknown[] };
}

export interface KernelLine {
  name: string;
  line: number;
}

/** Kernels and their first lines, in file order, from the server's code lenses. */
export function kernelsFromLenses(lenses: readonly LensLike[]): KernelLine[] {
  const byName = new Map<string, number>();
  for (const lens of lenses) {
    const name = lens.command?.arguments?.[1];
    if (lens.command?.command.startsWith('cudaAgent.') && typeof name === 'string' && !byName.has(name)) {
      byName.set(name, lens.range.start.line);
    }
  }
  return [...byName].map(([name, line]) => ({ name, line })).sort((a, b) => a.line - b.line);
}

/**
 * The kernel the cursor is in: the last one starting at or above the cursor's line, except in a
 * `/* cuda-agent` spec comment, which belongs to the kernel below it. Above the first kernel there is no
 * answer unless the file has only one kernel: the caller asks the user.
 */
export function kernelAtLine(
  kernels: readonly KernelLine[],
  line: number,
  text?: readonly string[],
): string | undefined {
  if (text !== undefined && inSpecComment(text, line)) {
    const below = kernels.find((kernel) => kernel.line > line);
    if (below !== undefined) {
      return below.name;
    }
  }
  let found: string | undefined;
  for (const kernel of kernels) {
    if (kernel.line <= line) {
      found = kernel.name;
    }
  }
  return found ?? (kernels.length === 1 ? kernels[0].name : undefined);
}

/** Whether `line` lies in a block comment opened by `/* cuda-agent` (the spec's marker). */
export function inSpecComment(text: readonly string[], line: number): boolean {
  for (let i = Math.min(line, text.length - 1); i >= 0; i--) {
    const opened = text[i].lastIndexOf('/*');
    const closed = text[i].lastIndexOf('*/');
    if (closed > opened && i < line) {
      return false; // a comment closed above the cursor
    }
    if (opened >= 0 && opened > closed) {
      return /^\/\*\s*cuda-agent\b/.test(text[i].slice(opened));
    }
  }
  return false;
}
