// One client's view of its sidecar, with no I/O: whether to ask it at all (the
// dead-sidecar back-off, the refusals still within their Retry-After), what its answers
// mean, and the counters.

import { performance } from 'node:perf_hooks';
import { CircuitOpen, Malformed, SidecarError } from './errors.js';
import { documentOf } from './http.js';

export const State = Object.freeze({ CLOSED: 'closed', OPEN: 'open', HALF_OPEN: 'half_open' });
export const Outcome = Object.freeze({ SUCCESS: 'success', FAILURE: 'failure', IGNORED: 'ignored' });
export const Unreachable = Object.freeze({ FAIL_OPEN: 'fail_open', FAIL_CLOSED: 'fail_closed' });

const STATES = new Set(Object.values(State));

// fuseboxd's permit ids are base32; anything else could break the request line it goes in.
const PERMIT_ID = /^[A-Za-z0-9_-]{1,128}$/;

// When a refusal says nothing usable about when to ask again: long enough not to spin,
// as fuseboxd's own default for a refusal it cannot time.
const UNKNOWN_RETRY_AFTER_MS = 1000;

export class Sidecar {
  constructor(options, events) {
    this.options = options;
    this.events = events;
    this.downUntil = 0;
    this.unreachable = null;
    this.refusals = new Map();
    this.stats = { connects: 0, requests: 0, failedOpen: 0, refusedLocally: 0 };
  }

  backingOff() {
    return performance.now() < this.downUntil;
  }

  /** The sidecar could not decide: nothing asks it again for backoffMs. */
  down(error) {
    this.downUntil = performance.now() + this.options.backoffMs;
    const first = this.unreachable === null;
    this.unreachable = error;
    if (first) this.events.unreachable(error);
  }

  /**
   * Reads an answer with read; any answer it can read (a refusal of the request included)
   * shows the sidecar deciding again.
   */
  #answered(read) {
    let result;
    try {
      result = read();
    } catch (e) {
      if (!(e instanceof Malformed)) this.up();
      throw e;
    }
    this.up();
    return result;
  }

  up() {
    if (this.unreachable === null) return;
    this.unreachable = null;
    this.events.reachable();
  }

  /**
   * What an acquire answers without a request: a refusal still within its Retry-After, or,
   * while backing off, what the breaker does when the sidecar cannot decide; else null.
   */
  withoutAsking(name, when) {
    const now = performance.now();
    const refusal = this.refusals.get(name);
    if (refusal !== undefined) {
      if (now < refusal.until) {
        this.stats.refusedLocally++;
        const c = refusal.cause;
        return new CircuitOpen(name, c.state, c.reason, Math.max(1, Math.floor(refusal.until - now)));
      }
      this.refusals.delete(name);
    }
    if (now < this.downUntil) return this.cannotDecide(name, when);
    return null;
  }

  cannotDecide(name, when) {
    if (when === Unreachable.FAIL_CLOSED) return new CircuitOpen(name, State.OPEN, 'unreachable', this.options.backoffMs);
    this.stats.failedOpen++;
    return { breaker: name, id: null, state: State.CLOSED, leaseMs: 0, grantedAt: performance.now(), probe: false };
  }

  /** Reads the answer to an acquire: a permit, a refusal, a SidecarError thrown, or Malformed. */
  permit(name, answer) {
    return this.#answered(() => this.#permit(name, answer));
  }

  #permit(name, answer) {
    if (answer.status === 201) {
      const doc = documentOf(answer);
      if (typeof doc.permit !== 'string' || !PERMIT_ID.test(doc.permit)) {
        throw new Malformed(`a 201 without a permit (${JSON.stringify(answer.body.toString('latin1').slice(0, 80))})`);
      }
      const state = doc.state === State.HALF_OPEN ? State.HALF_OPEN : State.CLOSED;
      const leaseMs = Number.isInteger(doc.leaseMs) ? doc.leaseMs : 0;
      return { breaker: name, id: doc.permit, state, leaseMs, grantedAt: performance.now(), probe: state === State.HALF_OPEN };
    }
    if (answer.status === 429) return this.#refusal(name, answer);
    if (answer.status === 400 || answer.status === 413) throw refused(name, answer);
    throw new Malformed(`a ${answer.status} to an acquire: ${why(answer)}`);
  }

  /**
   * Every 429 is a short-circuit, whatever its state and reason: a refusal the client
   * does not understand still says not to call.
   */
  #refusal(name, answer) {
    let doc = {};
    try {
      doc = documentOf(answer);
    } catch {
      // a refusal all the same
    }
    const state = STATES.has(doc.state) ? doc.state : State.OPEN;
    const reason = typeof doc.reason === 'string' && doc.reason ? doc.reason : 'unknown';
    let retryAfterMs = doc.retryAfterMs;
    if (!Number.isInteger(retryAfterMs) || retryAfterMs < 0) {
      const header = answer.headers['retry-after'] ?? '';
      retryAfterMs = /^\d{1,9}$/.test(header) ? Number(header) * 1000 : UNKNOWN_RETRY_AFTER_MS;
    }
    const cause = new CircuitOpen(name, state, reason, retryAfterMs);
    // Only an open circuit's wait is a time: a half-open one's is a guess, and the probe
    // in flight may close the circuit any moment.
    const honour = state === State.OPEN ? Math.min(retryAfterMs, this.options.maxRetryAfterMs) : 0;
    if (honour > 0) this.refusals.set(name, { until: performance.now() + honour, cause });
    return cause;
  }

  settled(answer) {
    return this.#answered(() => this.#settled(answer));
  }

  #settled(answer) {
    if (answer.status === 204) return true;
    if (answer.status === 410) return false;
    throw new Malformed(`a ${answer.status} to a release: ${why(answer)}`);
  }

  description(name, answer) {
    return this.#answered(() => this.#description(name, answer));
  }

  #description(name, answer) {
    if (answer.status === 200) return documentOf(answer);
    if (answer.status >= 400 && answer.status < 500) throw refused(name, answer);
    throw new Malformed(`a ${answer.status} to a read: ${why(answer)}`);
  }

  tripped(name, answer) {
    return this.#answered(() => this.#tripped(name, answer));
  }

  #tripped(name, answer) {
    if (answer.status === 204) return;
    if (answer.status >= 400 && answer.status < 500) throw refused(name, answer);
    throw new Malformed(`a ${answer.status} to a trip: ${why(answer)}`);
  }
}

export function stateOf(description) {
  if (!STATES.has(description.state)) throw new Malformed(`a breaker whose state is ${JSON.stringify(description.state)}`);
  return description.state;
}

function refused(name, answer) {
  return new SidecarError(`fusebox: ${name}: the sidecar refused the request (${answer.status}): ${why(answer)}`, answer.status);
}

function why(answer) {
  try {
    const { error } = documentOf(answer);
    return error === undefined ? 'no error given' : String(error);
  } catch {
    return answer.body.length ? JSON.stringify(answer.body.toString('latin1').slice(0, 80)) : 'no body';
  }
}
