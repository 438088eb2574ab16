#!/usr/bin/env node
// The `outbox-inbox` command: the consumer's commands (`outbox inbox …` of the relay package). From
// a source checkout it runs the TypeScript CLI through Node's type stripping (Node >= 22.18). The
// installed package ships no TypeScript sources (and Node refuses to strip types under
// node_modules), so there it runs the CLI compiled into dist/ at pack time. The package keeps the
// repository's paths (shared/consumer/bin, scripts, dist/shared/consumer/cli).
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';

createRequire(import.meta.url)('../../../scripts/check-node.cjs');
const source = new URL('../cli/main.ts', import.meta.url);
const { main } = await import(existsSync(source) ? source.href : '../../../dist/shared/consumer/cli/main.js');
process.exitCode = await main(process.argv);
