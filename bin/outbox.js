#!/usr/bin/env node
// The `outbox` command. The CLI is TypeScript run through Node's type stripping (Node >= 22.18).
import { createRequire } from 'node:module';

createRequire(import.meta.url)('../scripts/check-node.cjs');
const { main } = await import('../cli/main.ts');
process.exitCode = await main(process.argv);
