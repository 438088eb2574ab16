#!/usr/bin/env node
// The `outbox` command. The CLI is TypeScript run through Node's type stripping (Node >= 22.18).
import { main } from '../cli/main.ts';

process.exitCode = await main(process.argv);
