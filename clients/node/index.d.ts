// Types of @fusebox/client (src/index.js).

import { EventEmitter } from 'node:events';

export declare const DEFAULT_SOCKET: '/var/run/fusebox/fusebox.sock';

/** A breaker's state, spelled as the Go library and the fuseboxd API spell it. */
export declare const State: Readonly<{ CLOSED: 'closed'; OPEN: 'open'; HALF_OPEN: 'half_open' }>;
export type State = (typeof State)[keyof typeof State];

/** How a call went, as its permit is released with it. */
export declare const Outcome: Readonly<{ SUCCESS: 'success'; FAILURE: 'failure'; IGNORED: 'ignored' }>;
export type Outcome = (typeof Outcome)[keyof typeof Outcome];

/** What a breaker does while its sidecar cannot decide. */
export declare const Unreachable: Readonly<{ FAIL_OPEN: 'fail_open'; FAIL_CLOSED: 'fail_closed' }>;
export type Unreachable = (typeof Unreachable)[keyof typeof Unreachable];

export interface ClientOptions {
  /** The sidecar's Unix socket; default DEFAULT_SOCKET. */
  socket?: string;
  /** How long connecting may take; default 100. */
  connectTimeoutMs?: number;
  /** How long one request may take, once connected; default 250. */
  timeoutMs?: number;
  /** How long the client fails open without asking, after the sidecar could not decide; default 1000. */
  backoffMs?: number;
  /** How much of a refusal's Retry-After the client honours without asking again; default 1000, 0 for none. */
  maxRetryAfterMs?: number;
}

export interface BreakerOptions {
  /** Default Unreachable.FAIL_OPEN. */
  whenUnreachable?: Unreachable;
  /** Which errors of a call count as failures (default: all); one that does not is a success, and call() throws it without the fallback. */
  isFailure?: (error: unknown) => boolean;
}

export interface Permit {
  readonly breaker: string;
  /** The sidecar's id; null for a call run without asking, the sidecar being unable to decide. */
  readonly id: string | null;
  /** The state it was granted in: 'half_open' means this call is a probe. */
  readonly state: State;
  readonly leaseMs: number;
  /** performance.now() when it was granted. */
  readonly grantedAt: number;
  readonly probe: boolean;
}

export interface Stats {
  /** Connections tried (the failed ones included). */
  connects: number;
  /** Requests written to the sidecar. */
  requests: number;
  /** Calls run without a permit because the sidecar could not decide. */
  failedOpen: number;
  /** Calls short-circuited without asking, within a refusal's Retry-After. */
  refusedLocally: number;
}

export interface Callbacks<T> {
  /** Run instead of close when the call is short-circuited (cause: a CircuitOpen) or fails (cause: what it threw). */
  open?: (cause: unknown) => T | Promise<T>;
  close: () => T | Promise<T>;
  /** Run instead of close while the circuit probes. */
  halfOpen?: () => T | Promise<T>;
}

export declare class Client extends EventEmitter {
  constructor(options?: ClientOptions);
  breaker(name: string, options?: BreakerOptions): Breaker;
  readonly socket: string;
  /** Why the sidecar could not decide, until it answers again; null while it answers. */
  readonly unreachable: SidecarUnreachable | null;
  stats(): Stats;
  close(): void;
  on(event: 'unreachable', listener: (error: SidecarUnreachable) => void): this;
  on(event: 'reachable', listener: () => void): this;
  on(event: string | symbol, listener: (...args: any[]) => void): this;
  once(event: 'unreachable', listener: (error: SidecarUnreachable) => void): this;
  once(event: 'reachable', listener: () => void): this;
  once(event: string | symbol, listener: (...args: any[]) => void): this;
}

/** A breaker as fuseboxd serves it (GET /v1/breakers/{name}; docs/fuseboxd.md). */
export interface Description {
  name: string;
  state: State;
  /** Enforce, MetricsOnly, ForcedOpen or ForcedClosed. */
  mode: string;
  counts: { calls: number; failures: number; successes: number; slow: number };
  /** The permits clients of the sidecar hold, let lapse, and were refused at a cap. */
  permits: { held: number; lapsed: number; refusedAtCap: number };
  /** The policy in force, as the operator publishes it (docs/config-format.md). */
  policy: Policy;
  /** The generation of the published config it runs; 0 for the default policy. */
  generation: number;
  /** What its candidate policy did in shadow (docs/design.md §11); absent without one. */
  candidate?: CandidateFigures;
}

/** A published policy (docs/config-format.md); durations in Go's syntax ("30s"). */
export interface Policy {
  name: string;
  generation: number;
  uid?: string;
  openTimeout: string;
  window: string;
  failureRatio: number;
  minimumThroughput: number;
  successThreshold: number;
  halfOpenPermittedCalls: number;
  slowCallDuration?: string;
  slowCallRatio?: number;
  maxOpenTimeout?: string;
  mode: string;
  scope: string;
  retryBudget?: { percent: number; minPerSecond: number };
  throttle?: { k: number };
  fleet?: { pods: number; requests: number; accepts: number };
  verdict?: { state: string; since: string; consecutiveOpens?: number; openTimeout?: string };
  candidate?: Omit<Policy, 'name' | 'generation' | 'uid' | 'mode' | 'scope' | 'retryBudget' | 'throttle' | 'fleet' | 'verdict' | 'candidate'>;
}

/** A candidate policy's figures, as a pod's report spells them. */
export interface CandidateFigures {
  state: string;
  since: string;
  opens: number;
  wouldRefuse: number;
  startTime?: string;
  timeOpen?: string;
  enforced?: { opens: number; refused: number; timeOpen?: string };
}

export declare class Breaker {
  readonly name: string;
  readonly client: Client;
  /** call(open, close, halfOpen), as utopia-php/circuit-breaker has it. */
  call<T>(callbacks: Callbacks<T>): Promise<T>;
  /** A permit, or a CircuitOpen thrown. */
  acquire(options?: { leaseMs?: number }): Promise<Permit>;
  /** false when the outcome counted for nothing; never throws. */
  release(permit: Permit, outcome: Outcome | boolean): Promise<boolean>;
  state(): Promise<State>;
  /** The breaker as the sidecar serves it; a SidecarUnreachable thrown when it cannot. */
  describe(): Promise<Description>;
  trip(): Promise<void>;
}

export declare class FuseboxError extends Error {}

export declare class CircuitOpen extends FuseboxError {
  readonly breaker: string;
  readonly state: State;
  /** fuseboxd's reason ("open", "half_open_saturated", "forced_open", "concurrency" for a concurrency limit reached, with the circuit closed, one for a client holding too many permits, ...), "unknown" when it gave none, or "unreachable". */
  readonly reason: string;
  readonly retryAfterMs: number;
}

export declare class SidecarError extends FuseboxError {
  /** The HTTP status the sidecar answered; 0 when it answered nothing usable. */
  readonly status: number;
}

export declare class SidecarUnreachable extends SidecarError {}

export declare function defaultClient(): Client;
export declare function breaker(name: string, options?: BreakerOptions): Breaker;
