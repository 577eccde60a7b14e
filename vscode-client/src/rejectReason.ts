// The optional reason of a Reject: the choices offered after Reject, and the server command's arguments.
// Pure (no vscode import), so the unit tests run it under plain Node.

import { REJECT_REASONS, type RejectReason } from './protocol';

export interface ReasonChoice {
  label: string;
  reason: RejectReason | undefined; // undefined: reject without saying why
}

export const SKIP_LABEL = 'No reason: just reject';

/** The reasons in the server's order, then the way to skip (Escape skips too). */
export function reasonChoices(): ReasonChoice[] {
  return [...REJECT_REASONS.map((reason) => ({ label: reason, reason })), { label: SKIP_LABEL, reason: undefined }];
}

/** A reason already given with the command (a caller that asked for it itself), when it is one of ours. */
export function reasonFromArguments(args: readonly unknown[]): RejectReason | undefined {
  const given = args[2];
  return REJECT_REASONS.find((reason) => reason === given);
}

/** cudaAgent.rejectRewrite's arguments: [uri, kernel], and the reason where there is one. */
export function rejectArguments(uri: string, kernel: string, reason: RejectReason | undefined): string[] {
  return reason === undefined ? [uri, kernel] : [uri, kernel, reason];
}
