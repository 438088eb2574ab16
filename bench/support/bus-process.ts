/**
 * The local bus in a process of its own, so that the CPU it spends parsing and answering PutEvents
 * is not charged to the relay being measured (on loopback, a shared process would also share one
 * event loop). Prints `{"url": …}` as its first stdout line; controlled over its `/_local/*`
 * endpoints (faults, stats, events, reset). Ends on SIGTERM or when its parent's stdin closes.
 */
import { startLocalBus } from '../../shared/local/bus.ts';

const bus = await startLocalBus();
process.stdout.write(`${JSON.stringify({ url: bus.url })}\n`);
const stop = () => {
  void bus.close().then(() => process.exit(0));
};
process.once('SIGTERM', stop);
process.stdin.on('end', stop);
process.stdin.resume();
