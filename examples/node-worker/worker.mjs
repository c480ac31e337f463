// One Node worker calling an upstream through the pod's breaker, as each process of a
// cluster or PM2 pool would. Every worker asks the same fuseboxd, so the circuit one
// worker's failures open is open for all of them at once.
//
//   node worker.mjs --breaker payments-api --upstream http://127.0.0.1:8080/ \
//       [--socket /var/run/fusebox/fusebox.sock] [--timeout-ms 250] [--interval-ms 20] [--stop-file FILE]
//
// Prints one line per call: the worker, the call, and what the caller got.

import { existsSync } from 'node:fs';
import { request } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
// The client from this repository; an application imports '@fusebox/client'.
import { CircuitOpen, Client, DEFAULT_SOCKET } from '../../clients/node/src/index.js';

const { values: opts } = parseArgs({
  options: {
    breaker: { type: 'string', default: 'payments-api' },
    upstream: { type: 'string', default: 'http://127.0.0.1:8080/' },
    socket: { type: 'string', default: DEFAULT_SOCKET },
    'timeout-ms': { type: 'string', default: '250' },
    'interval-ms': { type: 'string', default: '20' },
    'stop-file': { type: 'string' },
    'max-calls': { type: 'string', default: '1000' },
  },
});

const client = new Client({ socket: opts.socket, timeoutMs: Number(opts['timeout-ms']) });
const breaker = client.breaker(opts.breaker);

// One GET, failing on a 5xx or no answer.
function quote() {
  return new Promise((resolve, reject) => {
    const req = request(opts.upstream, { timeout: 2000 }, (res) => {
      res.resume();
      res.on('end', () => (res.statusCode >= 500 ? reject(new Error(`upstream answered ${res.statusCode}`)) : resolve('ok')));
    });
    req.on('timeout', () => req.destroy(new Error('upstream timed out')));
    req.on('error', reject);
    req.end();
  });
}

const fallback = (cause) => (cause instanceof CircuitOpen ? `fallback reason=${cause.reason}` : 'fallback reason=failed');

for (let i = 1; i <= Number(opts['max-calls']); i++) {
  if (opts['stop-file'] && existsSync(opts['stop-file'])) break;
  const answer = await breaker.call({ open: fallback, close: quote });
  process.stdout.write(`worker=${process.pid} call=${i} answer=${answer}\n`);
  await sleep(Number(opts['interval-ms']));
}
client.close();
