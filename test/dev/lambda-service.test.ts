/**
 * The local Lambda service's counts, which the deployed benches read: an invocation waiting for a
 * new environment's sandbox and init is running but its handler is not (lambda-scale's "once all
 * ran" counted such invocations as relays at work, so its rate included the extras' cold starts).
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LambdaService } from '../../shared/local/lambda-runtime/lambda-service.ts';

let assetDir: string;
beforeAll(async () => {
  assetDir = await mkdtemp(join(tmpdir(), 'lambda-service-'));
  // A handler that takes 600 ms, so each phase can be observed from outside.
  await writeFile(
    join(assetDir, 'index.mjs'),
    'export const handler = async () => { await new Promise((r) => setTimeout(r, 600)); return { ok: true }; };\n',
  );
});
afterAll(async () => {
  await rm(assetDir, { recursive: true, force: true });
});

describe('LambdaService', () => {
  it('counts an invocation in its cold start as running, and its handler only once init is done', async () => {
    const service = new LambdaService({
      spec: { name: 'counts', assetDir, handler: 'index.handler', memoryMb: 128, environment: {} },
      baseEnv: {},
      timeoutMs: 10_000,
      coldStartExtraMs: 400,
    });
    const counts = () => ({ running: service.running, handlers: service.handlersRunning });
    try {
      const run = service.invoke({});
      await sleep(150); // inside the 400 ms sandbox
      expect(counts()).toEqual({ running: 1, handlers: 0 });
      let handlerSeenAt: number | undefined;
      while (service.running > 0) {
        if (service.handlersRunning === 1 && handlerSeenAt === undefined) handlerSeenAt = Date.now();
        await sleep(20);
      }
      const record = await run;
      expect(record.outcome).toMatchObject({ type: 'result', result: { ok: true } });
      expect(record.coldStart).toBe(true);
      // The handler was counted while it ran: from its start, after the sandbox and the init.
      expect(handlerSeenAt).toBeGreaterThanOrEqual(record.startedAt);
      expect(handlerSeenAt).toBeLessThan(record.endedAt);
      expect(record.startedAt - record.requestedAt).toBeGreaterThanOrEqual(400);
      expect(counts()).toEqual({ running: 0, handlers: 0 });

      // A warm invocation: no sandbox, the handler counted at once.
      const warm = service.invoke({});
      await sleep(150);
      expect(counts()).toEqual({ running: 1, handlers: 1 });
      expect((await warm).coldStart).toBe(false);
    } finally {
      await service.stop();
    }
  });
});
