/**
 * How long one PutEvents attempt waits for the bus's answer, learned from the answers it gets.
 *
 * A fixed per-attempt timeout turns a bus that is slow but working into a duplicate storm: with
 * 3 s per attempt and a bus answering every request correctly after 4 s, each attempt timed out
 * after the bus had accepted its entries, nothing was ever marked published, and 20 events were
 * delivered 195 times in 45 s (issue 19). A slow dependency that still works is the common gray
 * failure, so the timeout goes to its ceiling when it fires (each timeout of a working bus is a
 * duplicate delivery; doubling from 3 s took three deliveries for a bus answering in 9 s), and
 * shrinks slowly back toward a multiple of what the bus has recently taken to answer. The pass
 * caps it, call by call, to what the invocation leaves (it renews its lease during the call).
 */
import { MAX_CALL_MS } from './pass-deadlines.ts';

/** Bounds and pace of {@link AnswerTimeout}, ms unless named otherwise. */
export interface AnswerTimeoutOptions {
  /** The timeout before any answer was seen. @default 3000 (the fixed timeout it replaces) */
  initialMs?: number;
  /** Never below this. @default 1000 */
  floorMs?: number;
  /**
   * Never above this (a pass caps it lower, to its budget). @default 10000; the relay's is
   * `maxCallMs(leaseSeconds)` (pass-deadlines.ts): 10 s up to a 13 s lease, the lease less 3 s above
   */
  ceilingMs?: number;
}

/** The timeout is at least this multiple of the slowest recent answer. */
const LATENCY_MULTIPLE = 4;
/** Answers remembered for that: the slowest of the last 32. */
const RECENT_ANSWERS = 32;
/**
 * After an answer, the timeout moves down this share of the way to its target: once the slow
 * answers have left the window, it comes back from 16 s to within 10 % of a 1 s target in about
 * 48 answers (0.9^48 × 15 s ≈ 0.1 s), so a few fast answers after a slow spell do not undo what
 * the spell taught.
 */
const SHRINK_SHARE = 0.1;

/**
 * The per-attempt answer timeout of PutEvents for one relay (all its lanes share it; the Lambda
 * handler keeps one across warm invocations, so a slow bus is learned once, not every minute).
 */
export class AnswerTimeout {
  readonly floorMs: number;
  readonly ceilingMs: number;
  #ms: number;
  readonly #recent: number[] = [];
  #next = 0;

  constructor(options: AnswerTimeoutOptions = {}) {
    this.floorMs = options.floorMs ?? 1_000;
    this.ceilingMs = options.ceilingMs ?? MAX_CALL_MS;
    this.#ms = this.#clamp(options.initialMs ?? 3_000);
  }

  /** The current timeout, ms. */
  get ms(): number {
    return this.#ms;
  }

  /**
   * What an attempt starting now may wait, ms: the learned timeout, capped to `budgetMs` (what
   * the lease and the invocation leave the call).
   */
  forCall(budgetMs: number): number {
    return Math.max(0, Math.floor(Math.min(this.#ms, budgetMs)));
  }

  /** The bus answered (whatever the answer) after `latencyMs`. */
  answered(latencyMs: number): void {
    if (this.#recent.length < RECENT_ANSWERS) this.#recent.push(latencyMs);
    else this.#recent[this.#next] = latencyMs;
    this.#next = (this.#next + 1) % RECENT_ANSWERS;
    const target = this.#clamp(LATENCY_MULTIPLE * Math.max(...this.#recent));
    // Up at once when answers come close to the timeout; down slowly.
    this.#ms = target >= this.#ms ? target : this.#ms - (this.#ms - target) * SHRINK_SHARE;
  }

  /**
   * Whether an attempt given `attemptMs` waited as long as any attempt may: a bus that did not
   * answer in that time answers slower than the lease allows, and no later attempt would wait
   * longer (the pass then counts the timeout against the entries' attempts, see pass.ts).
   */
  isCeiling(attemptMs: number): boolean {
    return attemptMs >= this.ceilingMs;
  }

  /**
   * Whether an attempt given `attemptMs` of a call's `budgetMs` waited the longest any attempt
   * will: the ceiling ({@link isCeiling}), or, when the call's budget was below the ceiling (a
   * Lambda invocation's remaining time capped it), the whole budget and at least 10 s (or the
   * ceiling, when lower). Without the second case a lease whose ceiling no call of an invocation
   * can reach (`OUTBOX_LEASE_SECONDS` near or above the relay's timeout) left a bus that never
   * answers as back-pressure for ever.
   * @returns `'ceiling'`, `'capped'` (the invocation's time, all of it), or `false`
   */
  longestWait(attemptMs: number, budgetMs: number): 'ceiling' | 'capped' | false {
    if (this.isCeiling(attemptMs)) return 'ceiling';
    const capped = budgetMs < this.ceilingMs && attemptMs >= Math.floor(budgetMs);
    // At least the longest call at the default lease: below it the attempt is given back, and a
    // later call, with more of an invocation ahead of it, waits longer.
    return capped && attemptMs >= Math.min(this.ceilingMs, MAX_CALL_MS) ? 'capped' : false;
  }

  /**
   * An attempt got no answer in the time it was given: the next one waits the ceiling, so that a
   * bus answering within it delivers an event at most twice (once timed out, once answered).
   */
  timedOut(): void {
    this.#ms = this.ceilingMs;
  }

  #clamp(ms: number): number {
    return Math.min(this.ceilingMs, Math.max(this.floorMs, ms));
  }
}
