// A sidecar that answers what fuseboxd never would (a test double of a misbehaving
// peer): whatever it says, call() never throws after the call ran and never loses its
// result; every 429 is a short-circuit.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CircuitOpen, Client, SidecarError, SidecarUnreachable } from '../src/index.js';
import { LyingSidecar, answer } from './support.js';

const PERMIT = '{"permit":"Q2CU4Q3YQ7RJ5DNJ7F2XG5SQTA","state":"closed","leaseMs":30000}\n';

// Answers to an acquire that are no decision: the call runs (fails open), once.
const UNDECIDED = {
  '200 instead of 201': answer('200 OK', PERMIT),
  '201 without a permit': answer('201 Created', '{"state":"closed","leaseMs":30000}'),
  '201 with a permit that is not an id': answer('201 Created', '{"permit":"../../trip","state":"closed"}'),
  '201 with a number for a permit': answer('201 Created', '{"permit":42}'),
  '201 of garbage': answer('201 Created', '\x00\xffnot json'),
  '201 of a JSON array': answer('201 Created', '[1,2]'),
  '500': answer('500 Internal Server Error', '{"error":"boom"}'),
  '503 out of permits (the old daemon)': answer('503 Service Unavailable', '{"error":"too many outstanding permits"}'),
  '302': answer('302 Found', '', 'Location: /elsewhere\r\n'),
  '404': answer('404 Not Found', '{"error":"no such endpoint"}'),
  chunked: Buffer.from('HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n'),
  'no Content-Length': Buffer.from(`HTTP/1.1 201 Created\r\n\r\n${PERMIT}`),
  'not HTTP': Buffer.from('SSH-2.0-OpenSSH_9.2\r\n\r\n'),
  'a head that never ends': Buffer.from(`HTTP/1.1 201 Created\r\n${'X: y\r\n'.repeat(4000)}`),
  'half an answer, then closed': Buffer.from('HTTP/1.1 201 Crea'),
  'closed without an answer': null,
};

// Refusals the client cannot fully read: still short-circuits (the fallback runs).
const REFUSALS = {
  '429 with an unknown state': [answer('429 Too Many Requests', '{"state":"sideways","reason":"open","retryAfterMs":10}'), 10],
  '429 permits exhausted, state closed': [answer('429 Too Many Requests', '{"state":"closed","reason":"permits exhausted","retryAfterMs":20}'), 20],
  '429 of garbage with a Retry-After': [answer('429 Too Many Requests', '<html>slow down</html>', 'Retry-After: 3\r\n'), 3000],
  '429 with nothing': [answer('429 Too Many Requests'), 1000],
};

// Answers to a release, after the call ran: the result is kept, release() says false.
const SETTLE_LIES = {
  200: answer('200 OK', '{}'),
  500: answer('500 Internal Server Error', '{"error":"boom"}'),
  garbage: Buffer.from('\x00\x01\x02\r\n\r\n'),
  'closed without an answer': null,
};

async function withLiar(answers, fn) {
  const liar = await LyingSidecar.start(answers);
  try {
    await fn(liar);
  } finally {
    await liar.close();
  }
}

// Patient, so that what a test sees is the lie, not a busy machine: the liar runs on this
// process's event loop, and a connection it has already accepted in the kernel is seen as
// connected only when the loop comes round, which a loaded machine delays past the
// default 100 ms.
function quiet(options) {
  const c = new Client({ timeoutMs: 2000, connectTimeoutMs: 2000, ...options });
  c.on('unreachable', () => {});
  return c;
}

for (const [lie, raw] of Object.entries(UNDECIDED)) {
  test(`an undecided acquire (${lie}) runs the call once and keeps its result`, () =>
    withLiar({ acquire: raw, release: answer('204 No Content') }, async (liar) => {
      const c = quiet({ socket: liar.socket, backoffMs: 600_000 });
      let ran = 0;
      const result = await c.breaker('payments-api').call({ open: () => 'fallback', close: () => (ran++, 'result') });
      assert.equal(result, 'result');
      assert.equal(ran, 1);
      assert.deepEqual(liar.asked, ['acquire'], 'released a permit it never got');
      assert.ok(c.unreachable instanceof SidecarUnreachable);
      assert.equal(c.stats().failedOpen, 1);
      c.close();
    }));
}

for (const [lie, [raw, retryAfterMs]] of Object.entries(REFUSALS)) {
  test(`every 429 is a short-circuit (${lie})`, () =>
    withLiar({ acquire: raw }, async (liar) => {
      const c = quiet({ socket: liar.socket, maxRetryAfterMs: 0 });
      let ran = false;
      const cause = await c.breaker('payments-api').call({ open: (e) => e, close: () => (ran = true) });
      assert.equal(ran, false, 'a refusal ran the call');
      assert.ok(cause instanceof CircuitOpen);
      assert.equal(cause.retryAfterMs, retryAfterMs);
      assert.equal(c.unreachable, null);
      c.close();
    }));
}

for (const [lie, raw] of Object.entries(SETTLE_LIES)) {
  for (const outcome of ['resolves', 'rejects']) {
    test(`a lying release (${lie}) keeps the result of a call that ${outcome}`, () =>
      withLiar({ acquire: answer('201 Created', PERMIT), release: raw }, async (liar) => {
        const c = quiet({ socket: liar.socket });
        const result = await c.breaker('payments-api').call({
          open: (e) => `fallback after ${e.message}`,
          close: async () => {
            if (outcome === 'rejects') throw new Error('down');
            return 'result';
          },
        });
        assert.equal(result, outcome === 'resolves' ? 'result' : 'fallback after down');
        // A kept-alive connection closed under a request is tried once more on a new one.
        assert.ok(['acquire,release', 'acquire,release,release'].includes(liar.asked.join()), liar.asked.join());
        const other = quiet({ socket: liar.socket }).breaker('payments-api');
        const permit = await other.acquire();
        assert.equal(permit.id, 'Q2CU4Q3YQ7RJ5DNJ7F2XG5SQTA');
        assert.equal(await other.release(permit, true), false);
        c.close();
        other.client.close();
      }));
  }
}

test('a 400 is thrown before the call runs', () =>
  withLiar({ acquire: answer('400 Bad Request', '{"error":"breaker name \\"X\\": invalid"}') }, async (liar) => {
    const c = quiet({ socket: liar.socket });
    let ran = false;
    await assert.rejects(
      c.breaker('payments-api').call({ close: () => (ran = true) }),
      (e) => e instanceof SidecarError && e.status === 400 && /invalid/.test(e.message),
    );
    assert.equal(ran, false);
    c.close();
  }));

for (const [state, asks] of [['open', 1], ['half_open', 3], ['closed', 3]]) {
  test(`only an open circuit's Retry-After is honoured (${state})`, () =>
    withLiar({ acquire: answer('429 Too Many Requests', `{"state":"${state}","reason":"r","retryAfterMs":5000}`) }, async (liar) => {
      const c = quiet({ socket: liar.socket, maxRetryAfterMs: 60_000 });
      for (let i = 0; i < 3; i++) assert.ok((await c.breaker('payments-api').call({ open: (e) => e, close: () => 'never' })) instanceof CircuitOpen);
      assert.deepEqual(liar.asked, Array(asks).fill('acquire'));
      c.close();
    }));
}
