/**
 * The consumer's commands: parked and failed events, the failure queues, pruning and metrics.
 * The consumer package runs them as `outbox-inbox <command>` (main.ts), the relay package as
 * `outbox inbox <command>`: one set of commands, two ways in, so that a consumer team installs
 * only the consumer package, and existing `outbox inbox …` invocations keep working.
 */
import type { Command } from 'commander';
import type { OperationsContext } from '../../platform/cli/program.ts';
import { registerInbox } from './inbox-commands.ts';
import { registerInboxMaintenance } from './inbox-maintenance-commands.ts';

/** Adds the consumer's commands to `inbox`: the `outbox inbox` command, or the `outbox-inbox` program. */
export function registerInboxCommands(inbox: Command, ctx: OperationsContext): void {
  registerInbox(inbox, ctx);
  registerInboxMaintenance(inbox, ctx);
}
