/**
 * `npm run bus [-- --port N] [-- --refuse <text>]`: the local EventBridge endpoint on its own, for
 * trying the CLI or your own code: `outbox bus` of this checkout (shared/relay/cli/bus-command.ts),
 * which the installed relay package runs as `npx outbox bus`.
 */
import { main } from '../shared/relay/cli/main.ts';

process.exitCode = await main([process.argv[0] ?? 'node', 'outbox', 'bus', ...process.argv.slice(2)]);
