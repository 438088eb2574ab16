/**
 * Where the CPU goes: summarises a V8 `.cpuprofile` (from `node --cpu-prof`) as CPU time, not wall
 * time. Idle samples (the event loop waiting for the bus or Postgres) are dropped, so the shares
 * are of the CPU the main thread actually spent.
 *
 * Two views:
 * - `self`: each sample's own frame, by owner (a package, our code, Node's internals, V8's garbage
 *   collector, `(program)` = native work V8 cannot attribute to a JS function);
 * - `chargedTo`: each sample charged to the nearest frame up its stack that belongs to a package or
 *   to our code, so a socket write or `JSON.stringify` counts against whoever called it. GC and
 *   `(program)` samples have no JS stack and stay as they are.
 *
 * `node bench/support/cpu-profile.ts file.cpuprofile [events]` prints both tables.
 */
import { readFileSync } from 'node:fs';

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
  columnNumber: number;
}
interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  children?: number[];
}
/** The JSON `node --cpu-prof` writes. */
export interface CpuProfile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

/** One row of a summary: an owner or a function, its CPU time (ms) and share of the CPU samples. */
export interface ProfileRow {
  name: string;
  ms: number;
  share: number;
}

/** A profile reduced to CPU time by owner. */
export interface ProfileSummary {
  /** Main-thread CPU time in the profile (idle excluded), ms. */
  cpuMs: number;
  /** Idle time (waiting on I/O), ms. */
  idleMs: number;
  self: ProfileRow[];
  chargedTo: ProfileRow[];
  topFunctions: ProfileRow[];
}

/** The owner of a frame: a package name, `ours`, `node:<module>`, or a V8 pseudo-frame. */
export function ownerOf(frame: CallFrame): string {
  const { url, functionName } = frame;
  if (!url) {
    if (functionName.startsWith('(')) return functionName; // (garbage collector), (program), (idle)
    return 'native (builtins, called from JS)';
  }
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (pkg?.[1]) return pkg[1];
  if (url.startsWith('node:')) {
    const m = /^node:(?:internal\/)?([^/]+)/.exec(url);
    return `node:${m?.[1] ?? url}`;
  }
  if (/\/(shared|functions|cli|bin)\//.test(url) || url.endsWith('index.mjs')) return 'ours';
  return url;
}

/** Groups owners into the buckets the table in docs/investigations/relay-cpu.md#where-the-relays-cpu-goes uses. */
export function bucketOf(owner: string): string {
  if (owner.startsWith('@smithy/') || owner.startsWith('@aws-sdk/'))
    return 'AWS SDK (build, sign, send, parse)';
  if (owner === 'postgres') return 'postgres driver';
  if (owner === 'ours') return 'our code';
  if (owner === '(garbage collector)') return 'GC';
  if (owner === '(program)') return 'V8/Node native (program)';
  if (/^node:(net|stream|streams|_http_|http|dns|tls)/.test(owner)) return 'Node net/http/streams';
  if (owner === 'node:crypto') return 'Node crypto (hash, HMAC)';
  if (
    /^node:(modules|bootstrap|deps|main|vm|source_map)/.test(owner) ||
    owner === 'jiti' ||
    owner.startsWith('wasm:')
  )
    return 'start-up (loading modules)';
  if (owner.startsWith('node:')) return 'Node other (timers, promises, modules)';
  if (owner.startsWith('native')) return 'native builtins';
  return owner;
}

const isUserland = (owner: string) =>
  owner === 'ours' || (!owner.startsWith('node:') && !owner.startsWith('(') && !owner.startsWith('native'));

/**
 * Summarises a profile.
 * @param topN how many functions to list by self time
 */
export function summariseProfile(profile: CpuProfile, topN = 25): ProfileSummary {
  const byId = new Map<number, ProfileNode>();
  const parent = new Map<number, number>();
  for (const n of profile.nodes) {
    byId.set(n.id, n);
    for (const c of n.children ?? []) parent.set(c, n.id);
  }
  // Each sample lasts until the next one: timeDeltas[i + 1] is the duration of sample i.
  const selfUs = new Map<number, number>();
  for (let i = 0; i < profile.samples.length; i++) {
    const id = profile.samples[i] as number;
    const dt = profile.timeDeltas[i + 1] ?? 0;
    selfUs.set(id, (selfUs.get(id) ?? 0) + dt);
  }
  const chargedOwner = new Map<number, string>();
  const chargeOf = (id: number): string => {
    const cached = chargedOwner.get(id);
    if (cached) return cached;
    let cur: number | undefined = id;
    let owner = ownerOf((byId.get(id) as ProfileNode).callFrame);
    if (!owner.startsWith('(')) {
      while (cur !== undefined) {
        const o = ownerOf((byId.get(cur) as ProfileNode).callFrame);
        if (isUserland(o)) {
          owner = o;
          break;
        }
        cur = parent.get(cur);
        if (cur === undefined) owner = bucketOf(owner);
      }
    }
    chargedOwner.set(id, owner);
    return owner;
  };
  let idleUs = 0;
  let cpuUs = 0;
  const self = new Map<string, number>();
  const charged = new Map<string, number>();
  const fns = new Map<string, number>();
  for (const [id, us] of selfUs) {
    const frame = (byId.get(id) as ProfileNode).callFrame;
    const owner = ownerOf(frame);
    if (owner === '(idle)' || owner === '(root)') {
      idleUs += us;
      continue;
    }
    cpuUs += us;
    const bucket = bucketOf(owner);
    self.set(bucket, (self.get(bucket) ?? 0) + us);
    const c = bucketOf(chargeOf(id));
    charged.set(c, (charged.get(c) ?? 0) + us);
    const fn = `${frame.functionName || '(anonymous)'} (${owner})`;
    fns.set(fn, (fns.get(fn) ?? 0) + us);
  }
  const rows = (m: Map<string, number>, n = Number.POSITIVE_INFINITY): ProfileRow[] =>
    [...m.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, n)
      .map(([name, us]) => ({ name, ms: us / 1000, share: cpuUs > 0 ? us / cpuUs : 0 }));
  return {
    cpuMs: cpuUs / 1000,
    idleMs: idleUs / 1000,
    self: rows(self),
    chargedTo: rows(charged),
    topFunctions: rows(fns, topN),
  };
}

/** Markdown table of rows, with µs per event when `events` is given. */
export function profileTable(title: string, rows: ProfileRow[], events?: number): string {
  const head = events
    ? '| | share of CPU | µs per event |\n|---|---|---|'
    : '| | share of CPU | ms |\n|---|---|---|';
  const body = rows
    .map(
      (r) =>
        `| ${r.name} | ${(r.share * 100).toFixed(1)} % | ${events ? ((r.ms * 1000) / events).toFixed(1) : r.ms.toFixed(0)} |`,
    )
    .join('\n');
  return `${title}\n\n${head}\n${body}`;
}

if (import.meta.main) {
  const [file, events] = process.argv.slice(2);
  if (!file) throw new Error('usage: node bench/support/cpu-profile.ts file.cpuprofile [events]');
  const s = summariseProfile(JSON.parse(readFileSync(file, 'utf8')) as CpuProfile, 40);
  const n = events ? Number(events) : undefined;
  process.stdout.write(
    `main-thread CPU ${s.cpuMs.toFixed(0)} ms, idle ${s.idleMs.toFixed(0)} ms\n\n${profileTable('self', s.self, n)}\n\n${profileTable('charged to', s.chargedTo, n)}\n\n${profileTable('functions (self)', s.topFunctions, n)}\n`,
  );
}
