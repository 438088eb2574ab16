/**
 * The local bus's per-entry checks, as EventBridge applies them to a PutEvents entry (the classic
 * bus and the Custom Event Bus alike): Source, DetailType and Detail present, DetailType within its
 * length, no `aws.` source, Detail a JSON object, and the injected poison fault.
 */
import { MAX_DETAIL_TYPE_LENGTH } from '../../platform/envelope.ts';
import type { Faults } from './types.ts';

/** EventBridge's per-entry checks; returns [ErrorCode, ErrorMessage] for a refused entry. */
export function checkEntry(entry: Record<string, unknown>, faults: Faults): [string, string] | undefined {
  for (const field of ['Source', 'DetailType', 'Detail'] as const) {
    const value = entry[field];
    if (typeof value !== 'string' || value.length === 0) {
      return ['InvalidArgument', `Parameter ${field} is not valid. Reason: ${field} is a required argument.`];
    }
  }
  const source = entry.Source as string;
  const detailType = entry.DetailType as string;
  if (detailType.length > MAX_DETAIL_TYPE_LENGTH) {
    return [
      'InvalidArgument',
      `Parameter DetailType is not valid. Reason: longer than ${MAX_DETAIL_TYPE_LENGTH} characters.`,
    ];
  }
  if (source.startsWith('aws.')) {
    return ['NotAuthorizedForSourceException', `Not authorized for the source ${source}.`];
  }
  let detail: unknown;
  try {
    detail = JSON.parse(entry.Detail as string);
  } catch {
    return ['MalformedDetail', 'Detail is malformed.'];
  }
  if (detail === null || typeof detail !== 'object' || Array.isArray(detail)) {
    return ['MalformedDetail', 'Detail is malformed.'];
  }
  if (faults.poisonMarker && (entry.Detail as string).includes(faults.poisonMarker)) {
    return [faults.poisonCode ?? 'InvalidArgument', 'Injected poison: this entry is always refused'];
  }
  return undefined;
}
