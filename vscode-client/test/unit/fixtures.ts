// The recorded result of examples/elementwise.cu's saxpy (the server's cudaAgent/result, final).
import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import type { OptimizeResult } from '../../src/protocol';

// Compiled to out/test/unit/: the fixture stays in the source tree.
const FIXTURE = path.join(__dirname, '..', '..', '..', 'test', 'unit', 'fixtures', 'saxpy-result.json');

export function saxpyResult(changes: Partial<OptimizeResult> = {}): OptimizeResult {
  return { ...(JSON.parse(readFileSync(FIXTURE, 'utf8')) as OptimizeResult), ...changes };
}
