// The breaker's states through a real fuseboxd.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { CircuitOpen, Client, Outcome, SidecarError, SidecarUnreachable, State } from '../src/index.js';
import { Daemon, PATIENT, eventually } from './support.js';

let daemon;
const clients = [];

function client(options = {}) {
  const c = new Client({ socket: daemon.socket, ...PATIENT, ...options });
  clients.push(c);
  return c;
}

before(async () => {
  daemon = await Daemon.start();
});

after(async () => {
  for (const c of clients) c.close();
  await daemon.stop();
});

const down = async () => {
  throw new Error('payments-api is down');
};

test('closed, open, half-open, closed', async () => {
  await daemon.publish('node-cycle');
  const c = client();
  const b = c.breaker('node-cycle');
  assert.equal(await b.state(), State.CLOSED);

  const causes = [];
  for (let i = 0; i < 4; i++) {
    const result = await b.call({ open: (cause) => (causes.push(cause), 'fallback'), close: down });
    assert.equal(result, 'fallback');
  }
  assert.ok(causes.every((e) => e.message === 'payments-api is down'));
  assert.equal(await b.state(), State.OPEN);

  let ran = false;
  const refused = await b.call({ open: (cause) => cause, close: () => (ran = true) });
  assert.equal(ran, false, 'an open circuit ran the protected call');
  assert.ok(refused instanceof CircuitOpen);
  assert.equal(refused.state, State.OPEN);
  assert.equal(refused.reason, 'open');
  assert.ok(refused.retryAfterMs > 0 && refused.retryAfterMs <= 1000, `retryAfterMs ${refused.retryAfterMs}`);
  assert.match(refused.message, /short-circuited/);

  // After the open timeout (1s) a call probes, with the halfOpen callback.
  const used = [];
  await eventually('a probe after the open timeout', async () =>
    (await b.call({
      open: () => 'fallback',
      close: () => (used.push('close'), 'closed'),
      halfOpen: async () => (used.push('halfOpen'), 'probed'),
    })) === 'probed');
  assert.deepEqual(used, ['halfOpen']);
  assert.equal(await b.state(), State.CLOSED);
  assert.equal(await b.call({ open: () => 'fallback', close: () => 'ok', halfOpen: () => 'probed' }), 'ok');
  assert.equal(c.unreachable, null);
});

test('without open the causes are thrown', async () => {
  await daemon.publish('node-throw', { minimumThroughput: 2, openTimeout: '30s' });
  const b = client().breaker('node-throw');
  for (let i = 0; i < 2; i++) await assert.rejects(b.call({ close: down }), /payments-api is down/);
  await assert.rejects(b.call({ close: () => 'never' }), (e) => e instanceof CircuitOpen && e.breaker === 'node-throw');
});

test('Retry-After is honoured without asking', async () => {
  await daemon.publish('node-retry-after', { openTimeout: '30s' });
  const c = client({ maxRetryAfterMs: 60_000 });
  const b = c.breaker('node-retry-after');
  await b.trip();
  const first = await b.call({ open: (cause) => cause, close: () => 'never' });
  assert.ok(first instanceof CircuitOpen);
  assert.ok(first.retryAfterMs > 25_000 && first.retryAfterMs <= 30_000, `retryAfterMs ${first.retryAfterMs}`);
  const asked = c.stats().requests;
  for (let i = 0; i < 50; i++) {
    const again = await b.call({ open: (cause) => cause, close: () => 'never' });
    assert.ok(again instanceof CircuitOpen && again.reason === 'open');
    assert.ok(again.retryAfterMs <= first.retryAfterMs);
  }
  assert.equal(c.stats().requests, asked, 'a refusal within its Retry-After asked the sidecar again');
  assert.equal(c.stats().refusedLocally, 50);

  const eager = client({ maxRetryAfterMs: 0 });
  for (let i = 0; i < 3; i++) await eager.breaker('node-retry-after').call({ open: (cause) => cause, close: () => 'never' });
  assert.equal(eager.stats().requests, 3);
});

test('two-step acquire and release', async () => {
  await daemon.publish('node-two-step', { minimumThroughput: 2, openTimeout: '30s' });
  const b = client().breaker('node-two-step');
  const permit = await b.acquire({ leaseMs: 5000 });
  assert.ok(permit.id);
  assert.equal(permit.state, State.CLOSED);
  assert.equal(permit.leaseMs, 5000);
  assert.equal(await b.release(permit, Outcome.FAILURE), true);
  assert.equal(await b.release(permit, Outcome.FAILURE), false, 'a permit released twice counted twice');
  assert.equal(await b.release(await b.acquire(), Outcome.IGNORED), true);
  assert.deepEqual((await b.describe()).counts, { calls: 1, failures: 1, successes: 0, slow: 0 });
  assert.equal(await b.release(await b.acquire(), false), true);
  await assert.rejects(b.acquire(), CircuitOpen);
});

test('concurrent calls share the breaker, each on a connection of its own', async () => {
  await daemon.publish('node-concurrent', { minimumThroughput: 20, openTimeout: '30s' });
  const c = client();
  const b = c.breaker('node-concurrent');
  const results = await Promise.all(Array.from({ length: 20 }, (_, i) => b.call({ open: () => 'fallback', close: async () => i })));
  assert.deepEqual(results, Array.from({ length: 20 }, (_, i) => i));
  assert.ok(c.stats().connects <= 20);
  const other = client().breaker('node-concurrent');
  await Promise.all(Array.from({ length: 20 }, () => other.call({ open: () => null, close: down })));
  assert.equal(await b.state(), State.OPEN);
});

test('an error that is no failure is thrown and counts as none', async () => {
  await daemon.publish('node-classify', { minimumThroughput: 2, openTimeout: '30s' });
  const b = client().breaker('node-classify', { isFailure: (e) => !(e instanceof RangeError) });
  await assert.rejects(b.call({ open: () => 'fallback', close: () => { throw new RangeError('a 404'); } }), RangeError);
  const { counts } = await b.describe();
  assert.deepEqual([counts.calls, counts.failures], [1, 0]);
});

test('an AbortError counts for nothing and is thrown', async () => {
  await daemon.publish('node-abort', { minimumThroughput: 2, openTimeout: '30s' });
  const b = client().breaker('node-abort');
  const aborted = Object.assign(new Error('the caller gave up'), { name: 'AbortError' });
  await assert.rejects(b.call({ open: () => 'fallback', close: () => { throw aborted; } }), /gave up/);
  assert.deepEqual((await b.describe()).counts, { calls: 0, failures: 0, successes: 0, slow: 0 });
});

test('a name that cannot be a CircuitBreaker is thrown', async () => {
  const b = client().breaker('Not_A_Name');
  let ran = false;
  await assert.rejects(
    b.call({ open: () => 'fallback', close: () => (ran = true) }),
    (e) => e instanceof SidecarError && !(e instanceof SidecarUnreachable) && e.status === 400,
  );
  assert.equal(ran, false);
});

test('a concurrency limit reached is a short-circuit', async () => {
  // The pod's share of the fleet's limit on calls in flight (docs/design.md §12): one.
  await daemon.publish('node-bulkhead', { concurrency: { share: 1, pods: 0, generation: 1, maxWait: '0s' } });
  const c = client();
  const b = c.breaker('node-bulkhead');
  const held = await b.acquire();
  let ran = false;
  const refused = await b.call({ open: (cause) => cause, close: () => (ran = true) });
  assert.equal(ran, false, 'a call over the limit ran');
  assert.ok(refused instanceof CircuitOpen);
  assert.equal(refused.state, State.CLOSED);
  assert.equal(refused.reason, 'concurrency');
  assert.ok(refused.retryAfterMs > 0 && refused.retryAfterMs <= 1000, `retryAfterMs ${refused.retryAfterMs}`);
  await assert.rejects(b.call({ close: () => 'never' }), (e) => e instanceof CircuitOpen && e.reason === 'concurrency');
  // The circuit is closed: the refusal is not honoured without asking, and the slot a
  // release frees is the next call's.
  assert.equal(await b.release(held, Outcome.SUCCESS), true);
  assert.equal(await b.call({ open: () => 'fallback', close: () => 'ran' }), 'ran');
  assert.equal(c.stats().refusedLocally, 0);
  assert.equal((await b.describe()).concurrency.limited, 2);
});
