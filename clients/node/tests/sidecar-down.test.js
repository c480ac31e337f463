// The dead-sidecar rule (docs/design.md §8): after a refused or timed-out connection the
// client fails open at once, without touching the socket, for its back-off. What that
// costs per call is a benchmark's figure (docs/benchmarks.md); here the behaviour is
// asserted: the calls run, and no connection or request is attempted.

import assert from 'node:assert/strict';
import { linkSync, mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { CircuitOpen, Client, SidecarUnreachable, State, Unreachable } from '../src/index.js';
import { Daemon, eventually } from './support.js';

// Long enough that nothing in a test outlives it: the test sees the back-off, not its end.
const LONG_BACKOFF_MS = 600_000;
// A live daemon answers well within it on a loaded machine; a hung one costs it once. The
// connect timeout is as patient: the event loop sees even an accepted connection late on
// a loaded machine, past the default 100 ms.
const HUNG_TIMEOUT_MS = 1000;

const dir = mkdtempSync(path.join(tmpdir(), 'fbnode-down'));
after(() => rmSync(dir, { recursive: true, force: true }));

test('a missing socket fails open without touching it, and says so once', async () => {
  const missing = path.join(dir, 'none.sock');
  const c = new Client({ socket: missing, backoffMs: LONG_BACKOFF_MS });
  const heard = [];
  c.on('unreachable', (e) => heard.push(e));
  const b = c.breaker('payments-api');
  assert.equal(await b.call({ open: () => 'fallback', close: () => 'called' }), 'called');
  assert.equal(c.stats().connects, 1);
  for (let i = 0; i < 1000; i++) assert.equal(await b.call({ open: () => 'fallback', close: () => i }), i);
  const stats = c.stats();
  assert.deepEqual([stats.connects, stats.requests], [1, 0], 'a call tried the socket while backing off');
  assert.equal(stats.failedOpen, 1001);
  assert.ok(c.unreachable instanceof SidecarUnreachable);
  assert.match(c.unreachable.message, new RegExp(`${missing}.*ENOENT`));
  assert.equal(heard.length, 1, 'the fail-open is told once, not once a call');
  assert.equal(heard[0], c.unreachable);
  assert.equal(await b.state(), State.CLOSED);
  await assert.rejects(b.describe(), SidecarUnreachable);
});

test('without a listener the fail-open is a process warning', async () => {
  const c = new Client({ socket: path.join(dir, 'none-either.sock'), backoffMs: LONG_BACKOFF_MS });
  const warned = new Promise((resolve) => process.once('warning', resolve));
  assert.equal(await c.breaker('payments-api').call({ close: () => 1 }), 1);
  const warning = await warned;
  assert.equal(warning.name, 'FuseboxWarning');
  assert.equal(warning.code, 'FUSEBOX_SIDECAR_UNREACHABLE');
  assert.match(warning.message, /none-either\.sock/);
});

test('a refused connection fails open', async () => {
  // A socket file with nothing listening on it: a second name for a listening socket,
  // which stays when the server closes (and removes the first).
  const listening = path.join(dir, 'listening.sock');
  const refusing = path.join(dir, 'refusing.sock');
  const server = net.createServer();
  await new Promise((resolve) => server.listen(listening, resolve));
  linkSync(listening, refusing);
  await new Promise((resolve) => server.close(resolve));
  const c = new Client({ socket: refusing, backoffMs: LONG_BACKOFF_MS });
  c.on('unreachable', () => {});
  const b = c.breaker('payments-api');
  for (let i = 0; i < 100; i++) assert.equal(await b.call({ close: () => i }), i);
  assert.equal(c.stats().connects, 1);
  assert.match(c.unreachable.message, /ECONNREFUSED/);
});

test('fail closed short-circuits while unreachable', async () => {
  const c = new Client({ socket: path.join(dir, 'none.sock'), backoffMs: LONG_BACKOFF_MS });
  c.on('unreachable', () => {});
  const strict = c.breaker('payments-api', { whenUnreachable: Unreachable.FAIL_CLOSED });
  let ran = false;
  const cause = await strict.call({ open: (e) => e, close: () => (ran = true) });
  assert.ok(cause instanceof CircuitOpen);
  assert.equal(cause.reason, 'unreachable');
  assert.equal(ran, false);
  assert.equal(await strict.state(), State.OPEN);
  assert.equal(c.stats().failedOpen, 0);
});

test('a hung sidecar costs one timeout, then nothing', async () => {
  const daemon = await Daemon.start();
  try {
    await daemon.publish('node-hung');
    const c = new Client({ socket: daemon.socket, timeoutMs: HUNG_TIMEOUT_MS, connectTimeoutMs: HUNG_TIMEOUT_MS, backoffMs: LONG_BACKOFF_MS });
    const heard = [];
    c.on('unreachable', (e) => heard.push(e));
    const b = c.breaker('node-hung');
    assert.equal(await b.call({ close: () => 'warm' }), 'warm');
    await daemon.pause();
    try {
      assert.equal(await b.call({ open: () => 'fallback', close: () => 'first' }), 'first');
      const seen = c.stats();
      const results = await Promise.all(Array.from({ length: 200 }, (_, i) => b.call({ open: () => 'fallback', close: async () => i })));
      assert.deepEqual(results, Array.from({ length: 200 }, (_, i) => i));
      const now = c.stats();
      assert.deepEqual([now.connects, now.requests], [seen.connects, seen.requests], 'a call touched the hung sidecar');
      assert.equal(now.failedOpen, seen.failedOpen + 200);
      assert.match(c.unreachable.message, new RegExp(`no answer within ${HUNG_TIMEOUT_MS} ms`));
      assert.equal(heard.length, 1);
    } finally {
      daemon.resume();
    }
    c.close();
  } finally {
    await daemon.stop();
  }
});

test('after the back-off the sidecar is asked again', async () => {
  const daemon = await Daemon.start();
  try {
    await daemon.publish('node-recovers');
    const c = new Client({ socket: daemon.socket, timeoutMs: HUNG_TIMEOUT_MS, connectTimeoutMs: HUNG_TIMEOUT_MS, backoffMs: 50 });
    c.on('unreachable', () => {});
    let reachable = 0;
    c.on('reachable', () => reachable++);
    const b = c.breaker('node-recovers');
    await daemon.pause();
    try {
      assert.equal(await b.call({ close: () => 'unprotected' }), 'unprotected');
      assert.ok(c.unreachable !== null);
    } finally {
      daemon.resume();
    }
    await eventually('a call through the sidecar again', async () => (await b.call({ close: () => true })) && c.unreachable === null);
    assert.equal(reachable, 1);
    const permit = await b.acquire();
    assert.ok(permit.id);
    assert.equal(await b.release(permit, true), true);
    c.close();
  } finally {
    await daemon.stop();
  }
});

test("the process's breakers share one client", async () => {
  const { breaker, defaultClient, DEFAULT_SOCKET } = await import('../src/index.js');
  const a = breaker('payments-api');
  const b = breaker('inventory');
  assert.equal(a.client, b.client);
  assert.equal(a.client, defaultClient());
  assert.equal(a.client.socket, DEFAULT_SOCKET);
  assert.equal(DEFAULT_SOCKET, '/var/run/fusebox/fusebox.sock');
});
