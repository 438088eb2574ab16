/**
 * What a piece of work costs the Postgres server: WAL bytes and the server's CPU time. Meant for a
 * private cluster (the bench starts one), where nothing else writes WAL or spends CPU, so the
 * difference between two readings is the probed work's alone.
 *
 * WAL: `pg_current_wal_lsn()` before and after, as bytes (`pg_wal_lsn_diff`).
 * CPU: user + system time of every process of the cluster, from /proc (Linux): the postmaster's
 * own time, the time of the children it has reaped (`cutime` + `cstime`: backends that have
 * exited), and the time of its live children (backends, checkpointer, WAL writer, autovacuum).
 */
import { readdirSync, readFileSync } from 'node:fs';
import type { Sql } from '../../shared/platform/index.ts';

/** USER_HZ: 100 on every mainstream Linux build. */
const CLOCK_TICKS_PER_SECOND = 100;

/** One reading of the cluster's counters. */
export interface PgCostReading {
  /** WAL position, as `pg_current_wal_lsn()` prints it. */
  lsn: string;
  /** CPU time of all the cluster's processes so far, µs. */
  cpuUs: number;
}

/** What happened between two readings. */
export interface PgCost {
  walBytes: number;
  cpuUs: number;
  /** The WAL positions around the work, as `pg_current_wal_lsn()` printed them. */
  fromLsn: string;
  toLsn: string;
}

/** WAL records of one kind written between two positions (pg_walinspect's per-record stats). */
export interface WalRecordKind {
  /** Resource manager and record type, as pg_walinspect names them: `Heap/HOT_UPDATE`, `Btree/INSERT_LEAF`… */
  kind: string;
  count: number;
  /** Bytes of the records, full-page images included. */
  bytes: number;
}

/** Fields of /proc/<pid>/stat after the command name (which may hold spaces), from field 3. */
function statFields(pid: number): string[] | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return undefined; // exited between the listing and the read: its time is in the parent's cutime
  }
}

/** A probe of one cluster, found through a session of it. */
export class PgCostProbe {
  readonly #sql: Sql;
  readonly #postmaster: number;

  private constructor(sql: Sql, postmaster: number) {
    this.#sql = sql;
    this.#postmaster = postmaster;
  }

  /**
   * @param sql a connection to the cluster, on this machine
   * @throws when the server's processes cannot be read (not local, or not Linux)
   */
  static async open(sql: Sql): Promise<PgCostProbe> {
    const [row] = await sql<{ pid: number }[]>`select pg_backend_pid() as pid`;
    // A backend's parent is the postmaster.
    const fields = statFields(Number(row?.pid));
    const ppid = Number(fields?.[1]);
    if (!fields || !Number.isInteger(ppid) || ppid <= 1)
      throw new Error(
        'pg-cost: cannot read the server process from /proc (the cluster must run on this machine)',
      );
    return new PgCostProbe(sql, ppid);
  }

  /** CPU time of the postmaster, its reaped children and its live children, µs. */
  cpuUs(): number {
    const own = statFields(this.#postmaster);
    if (!own) throw new Error('pg-cost: the postmaster has exited');
    // utime, stime, cutime, cstime are fields 14–17 (index 11–14 here).
    let ticks = Number(own[11]) + Number(own[12]) + Number(own[13]) + Number(own[14]);
    for (const name of readdirSync('/proc')) {
      const pid = Number(name);
      if (!Number.isInteger(pid) || pid === this.#postmaster) continue;
      const f = statFields(pid);
      if (f && Number(f[1]) === this.#postmaster) ticks += Number(f[11]) + Number(f[12]);
    }
    return (ticks * 1e6) / CLOCK_TICKS_PER_SECOND;
  }

  /** Reads the WAL position and the CPU time. */
  async read(): Promise<PgCostReading> {
    const [row] = await this.#sql<{ lsn: string }[]>`select pg_current_wal_lsn()::text as lsn`;
    return { lsn: String(row?.lsn), cpuUs: this.cpuUs() };
  }

  /** WAL bytes and CPU time since `before`. */
  async since(before: PgCostReading): Promise<PgCost> {
    const after = await this.read();
    const [row] = await this.#sql<{ bytes: string }[]>`
      select pg_wal_lsn_diff(${after.lsn}::pg_lsn, ${before.lsn}::pg_lsn)::text as bytes`;
    return {
      walBytes: Number(row?.bytes),
      cpuUs: after.cpuUs - before.cpuUs,
      fromLsn: before.lsn,
      toLsn: after.lsn,
    };
  }

  /**
   * The WAL a measured piece of work wrote, by record kind, largest first. Needs the pg_walinspect
   * extension (contrib, shipped with Postgres 15+) in the probe's database; the WAL must still be
   * on disk (read it before the next few checkpoints recycle it).
   */
  async walRecords(cost: PgCost): Promise<WalRecordKind[]> {
    await this.#sql`create extension if not exists pg_walinspect`;
    const rows = await this.#sql<{ kind: string; count: string; bytes: string }[]>`
      select "resource_manager/record_type" as kind, count::text, combined_size::text as bytes
      from pg_get_wal_stats(${cost.fromLsn}::pg_lsn, ${cost.toLsn}::pg_lsn, true)
      where count > 0
      order by combined_size desc`;
    return rows.map((r) => ({ kind: r.kind, count: Number(r.count), bytes: Number(r.bytes) }));
  }

  /**
   * Measures `work`: a CHECKPOINT first (so every phase starts with the same full-page-write
   * state), then the readings around it.
   */
  async measure<T>(work: () => Promise<T>): Promise<{ cost: PgCost; result: T }> {
    await this.#sql`checkpoint`;
    const before = await this.read();
    const result = await work();
    return { cost: await this.since(before), result };
  }
}
