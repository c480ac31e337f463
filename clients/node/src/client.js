// The client of the pod's fuseboxd (docs/design.md §8) and its breakers.

import { EventEmitter } from 'node:events';
import net from 'node:net';
import { performance } from 'node:perf_hooks';
import { CircuitOpen, Malformed, SidecarUnreachable } from './errors.js';
import { AnswerReader, encode } from './http.js';
import { Outcome, Sidecar, State, Unreachable, stateOf } from './sidecar.js';

export const DEFAULT_SOCKET = '/var/run/fusebox/fusebox.sock';

// Idle connections a client keeps for concurrent calls; more are opened when more calls
// are in flight at once, and closed after.
const MAX_IDLE = 8;

// Reaching into a client from its breakers, without making it public.
const SIDECAR = Symbol('sidecar');
const EXCHANGE = Symbol('exchange');

/** A kept-alive connection the sidecar had closed before this request reached it. */
class Stale extends Error {}

class Timeout extends Error {}

/**
 * Speaks the pod's fuseboxd over its Unix socket, keeping connections alive.
 *
 * After a refused or timed-out connection, or an answer fuseboxd would never give, the
 * client does not touch the socket for backoffMs: every breaker then fails open (runs
 * the call) or closed at once, as each was made. It emits 'unreachable' (with the
 * SidecarUnreachable) when that begins, or, with no listener, a process warning; and
 * 'reachable' when the sidecar answers again. client.unreachable says why while it lasts.
 */
export class Client extends EventEmitter {
  #idle = [];

  constructor({ socket = DEFAULT_SOCKET, connectTimeoutMs = 100, timeoutMs = 250, backoffMs = 1000, maxRetryAfterMs = 1000 } = {}) {
    super();
    for (const [name, value] of Object.entries({ connectTimeoutMs, timeoutMs, backoffMs })) {
      if (!Number.isInteger(value) || value <= 0) {
        throw new RangeError(`fusebox: ${name} must be a positive number of milliseconds, not ${value}`);
      }
    }
    if (!Number.isInteger(maxRetryAfterMs) || maxRetryAfterMs < 0) {
      throw new RangeError(`fusebox: maxRetryAfterMs must be zero or more milliseconds, not ${maxRetryAfterMs}`);
    }
    const options = Object.freeze({ socket, connectTimeoutMs, timeoutMs, backoffMs, maxRetryAfterMs });
    this[SIDECAR] = new Sidecar(options, {
      unreachable: (error) => {
        if (this.listenerCount('unreachable') > 0) {
          this.emit('unreachable', error);
          return;
        }
        process.emitWarning(
          `${error.message}; breakers fail open (or closed, as each was made) without asking it, trying again every ${backoffMs} ms`,
          { type: 'FuseboxWarning', code: 'FUSEBOX_SIDECAR_UNREACHABLE' },
        );
      },
      reachable: () => this.emit('reachable'),
    });
  }

  /** A breaker of this pod, by its CircuitBreaker name. */
  breaker(name, { whenUnreachable = Unreachable.FAIL_OPEN, isFailure = () => true } = {}) {
    return new Breaker(this, name, whenUnreachable, isFailure);
  }

  get socket() {
    return this[SIDECAR].options.socket;
  }

  /** Why the sidecar could not decide, until it answers again; null while it answers. */
  get unreachable() {
    return this[SIDECAR].unreachable;
  }

  stats() {
    return { ...this[SIDECAR].stats };
  }

  /** Closes the kept-alive connections (a process exits without it: they are unref'd). */
  close() {
    for (const socket of this.#idle.splice(0)) socket.destroy();
  }

  /** One request and its answer, or SidecarUnreachable thrown (and the back-off begins). */
  async [EXCHANGE](what, method, path, body) {
    const data = encode(method, path, body);
    const sidecar = this[SIDECAR];
    try {
      let answer;
      try {
        answer = await this.#send(data, true);
      } catch (e) {
        if (!(e instanceof Stale)) throw e;
        answer = await this.#send(data, false);
      }
      return answer;
    } catch (e) {
      const error = unreachableError(sidecar, what, e);
      sidecar.down(error);
      throw error;
    }
  }

  async #send(data, reuse) {
    const { timeoutMs } = this[SIDECAR].options;
    let socket = reuse ? this.#idle.pop() : undefined;
    const kept = socket !== undefined;
    if (socket === undefined) socket = await this.#connect();
    socket.ref();
    this[SIDECAR].stats.requests++;
    const answer = await exchange(socket, data, timeoutMs, kept);
    if (answer.keepAlive && this.#idle.length < MAX_IDLE && !socket.destroyed) {
      socket.unref();
      this.#idle.push(socket);
    } else {
      socket.destroy();
    }
    return answer;
  }

  #connect() {
    const { socket: path, connectTimeoutMs } = this[SIDECAR].options;
    this[SIDECAR].stats.connects++;
    return new Promise((resolve, reject) => {
      const socket = net.createConnection({ path });
      const timer = setTimeout(() => {
        socket.destroy();
        reject(new Timeout(`connecting timed out after ${connectTimeoutMs} ms`));
      }, connectTimeoutMs);
      const failed = (e) => {
        clearTimeout(timer);
        reject(e);
      };
      socket.once('error', failed);
      socket.once('connect', () => {
        clearTimeout(timer);
        socket.off('error', failed);
        // An idle connection the sidecar closes, or that breaks, is simply dropped.
        socket.on('error', () => {});
        socket.on('close', () => {
          const i = this.#idle.indexOf(socket);
          if (i >= 0) this.#idle.splice(i, 1);
        });
        resolve(socket);
      });
    });
  }
}

function exchange(socket, data, timeoutMs, kept) {
  return new Promise((resolve, reject) => {
    const reader = new AnswerReader();
    let received = false;
    let done = false;
    const finish = (error, answer) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      socket.off('data', onData);
      socket.off('error', onError);
      socket.off('close', onClose);
      if (error) {
        socket.destroy();
        reject(error);
      } else {
        resolve(answer);
      }
    };
    const onData = (chunk) => {
      received = true;
      let answer;
      try {
        answer = reader.feed(chunk);
      } catch (e) {
        finish(e);
        return;
      }
      if (answer) finish(null, answer);
    };
    const onError = (e) => finish(kept && !received ? new Stale(e.message) : e);
    const onClose = () =>
      finish(kept && !received ? new Stale('closed') : new Error('the sidecar closed the connection before its answer was whole'));
    const timer = setTimeout(() => finish(new Timeout(`no answer within ${timeoutMs} ms`)), timeoutMs);
    socket.on('data', onData);
    socket.on('error', onError);
    socket.on('close', onClose);
    socket.write(data);
  });
}

function unreachableError(sidecar, what, cause) {
  let text;
  if (cause instanceof Stale) text = 'the sidecar closed the connection';
  else if (cause instanceof Malformed) text = `it answered ${cause.message}`;
  else text = cause.message;
  return new SidecarUnreachable(`fusebox: ${what}: sidecar unreachable at ${sidecar.options.socket}: ${text}`, 0, { cause });
}

function isAbort(e) {
  return e !== null && typeof e === 'object' && e.name === 'AbortError';
}

/**
 * One CircuitBreaker of the pod, decided by its fuseboxd and so shared by every process
 * of the pod. Made by client.breaker() or breaker().
 */
export class Breaker {
  #client;
  #when;
  #isFailure;

  constructor(client, name, whenUnreachable, isFailure) {
    if (!Object.values(Unreachable).includes(whenUnreachable)) {
      throw new RangeError(`fusebox: whenUnreachable must be Unreachable.FAIL_OPEN or FAIL_CLOSED, not ${whenUnreachable}`);
    }
    this.name = name;
    this.#client = client;
    this.#when = whenUnreachable;
    this.#isFailure = isFailure;
  }

  get client() {
    return this.#client;
  }

  /**
   * call(open, close, halfOpen), as utopia-php/circuit-breaker has it: runs close while the circuit is closed
   * (halfOpen, when given, while it probes), and open instead when the call is
   * short-circuited (its cause a CircuitOpen) or fails (its cause what it threw).
   * Without open those are thrown. An AbortError counts for nothing and is thrown.
   */
  async call({ open, close, halfOpen } = {}) {
    if (typeof close !== 'function') throw new TypeError('fusebox: call() needs a close function');
    const permit = await this.#admit(undefined);
    if (permit instanceof CircuitOpen) {
      if (!open) throw permit;
      return open(permit);
    }
    const run = permit.probe && halfOpen ? halfOpen : close;
    let result;
    try {
      result = await run();
    } catch (e) {
      if (isAbort(e)) {
        await this.release(permit, Outcome.IGNORED);
        throw e;
      }
      const failed = this.#isFailure(e);
      await this.release(permit, failed ? Outcome.FAILURE : Outcome.SUCCESS);
      if (failed && open) return open(e);
      throw e;
    }
    await this.release(permit, Outcome.SUCCESS);
    return result;
  }

  /** The first step of a call made in two: a permit, or CircuitOpen thrown. */
  async acquire({ leaseMs } = {}) {
    const permit = await this.#admit(leaseMs);
    if (permit instanceof CircuitOpen) throw permit;
    return permit;
  }

  /**
   * The second step: reports how the call went. false when the outcome counted for
   * nothing (released already, its lease ran out, or the sidecar could not take it). It
   * never throws: the call has run, and its result is the caller's.
   */
  async release(permit, outcome) {
    if (typeof outcome === 'boolean') outcome = outcome ? Outcome.SUCCESS : Outcome.FAILURE;
    const sidecar = this.#client[SIDECAR];
    if (permit.id === null || sidecar.backingOff()) return false;
    const durationMs = Math.max(0, Math.round(performance.now() - permit.grantedAt));
    const body = `{"outcome":${JSON.stringify(outcome)},"durationMs":${durationMs}}`;
    try {
      return sidecar.settled(await this.#client[EXCHANGE]('release', 'POST', `/v1/permits/${permit.id}`, body));
    } catch (e) {
      if (e instanceof Malformed) sidecar.down(unreachableError(sidecar, 'release', e));
      return false;
    }
  }

  /**
   * The state the sidecar holds now; while it cannot decide, the state calls are treated
   * as (closed when failing open). client.unreachable says which.
   */
  async state() {
    if (!this.#client[SIDECAR].backingOff()) {
      try {
        return stateOf(await this.describe());
      } catch (e) {
        if (!(e instanceof SidecarUnreachable) && !(e instanceof Malformed)) throw e;
      }
    }
    return this.#when === Unreachable.FAIL_OPEN ? State.CLOSED : State.OPEN;
  }

  /** The breaker as the sidecar serves it; SidecarUnreachable thrown when it cannot. */
  async describe() {
    const sidecar = this.#client[SIDECAR];
    const answer = await this.#client[EXCHANGE]('describe', 'GET', `/v1/breakers/${encodeURIComponent(this.name)}`, '');
    try {
      return sidecar.description(this.name, answer);
    } catch (e) {
      throw this.#malformed('describe', e);
    }
  }

  /** Opens the circuit now, for every process of the pod (trip(), as utopia-php/circuit-breaker has it). */
  async trip() {
    const sidecar = this.#client[SIDECAR];
    const answer = await this.#client[EXCHANGE]('trip', 'POST', `/v1/breakers/${encodeURIComponent(this.name)}/trip`, '');
    try {
      sidecar.tripped(this.name, answer);
    } catch (e) {
      throw this.#malformed('trip', e);
    }
  }

  #malformed(what, e) {
    if (!(e instanceof Malformed)) return e;
    const sidecar = this.#client[SIDECAR];
    const error = unreachableError(sidecar, what, e);
    sidecar.down(error);
    return error;
  }

  async #admit(leaseMs) {
    const sidecar = this.#client[SIDECAR];
    const local = sidecar.withoutAsking(this.name, this.#when);
    if (local !== null) return local;
    const body = leaseMs === undefined ? '' : JSON.stringify({ leaseMs });
    let answer;
    try {
      answer = await this.#client[EXCHANGE]('acquire', 'POST', `/v1/breakers/${encodeURIComponent(this.name)}/permits`, body);
    } catch (e) {
      if (e instanceof SidecarUnreachable) return sidecar.cannotDecide(this.name, this.#when);
      throw e;
    }
    try {
      return sidecar.permit(this.name, answer);
    } catch (e) {
      if (!(e instanceof Malformed)) throw e;
      sidecar.down(unreachableError(sidecar, 'acquire', e));
      return sidecar.cannotDecide(this.name, this.#when);
    }
  }
}
