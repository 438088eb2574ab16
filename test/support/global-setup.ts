/**
 * Provides a Postgres server to every test file: `DATABASE_URL` when set, else an embedded one
 * started for this run. Each test file then creates its own database on it (see db.ts).
 */
import type { TestProject } from 'vitest/node';
import { startEmbeddedPostgres } from '../../dev/embedded-postgres.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    databaseUrl: string;
  }
}

export default async function setup(project: TestProject) {
  const external = process.env.DATABASE_URL;
  if (external) {
    project.provide('databaseUrl', external);
    return;
  }
  const db = await startEmbeddedPostgres();
  project.provide('databaseUrl', db.url);
  return () => db.stop();
}
