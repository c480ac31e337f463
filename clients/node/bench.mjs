// What a call through the client costs: one call() (an acquire and its release) against
// a live fuseboxd, and each call against a hung one and a missing socket (the back-off).
// Run by cmd/fuseboxd's BenchmarkClients, which starts the daemons (docs/benchmarks.md):
//
//   node bench.mjs --live SOCKET --hung SOCKET --missing PATH [--calls N]

import { parseArgs } from 'node:util';
import { Client } from './src/index.js';

const { values: opts } = parseArgs({
  options: {
    live: { type: 'string' },
    hung: { type: 'string' },
    missing: { type: 'string' },
    calls: { type: 'string', default: '20000' },
  },
});
const calls = Number(opts.calls);

async function timed(b, n) {
  const took = [];
  const noop = () => null;
  for (let i = 0; i < n; i++) {
    const start = process.hrtime.bigint();
    await b.call({ close: noop });
    took.push(Number(process.hrtime.bigint() - start));
  }
  return took;
}

function line(kind, took, extra = '') {
  const s = [...took].sort((a, b) => a - b);
  const at = (q) => (s[Math.min(s.length - 1, Math.floor(q * s.length))] / 1000).toFixed(1);
  const mean = (took.reduce((a, b) => a + b, 0) / took.length / 1000).toFixed(1);
  console.log(`${kind} calls=${took.length} ${extra}p50_us=${at(0.5)} p99_us=${at(0.99)} mean_us=${mean}`);
}

const live = new Client({ socket: opts.live });
await timed(live.breaker('bench'), 1000);
line('live', await timed(live.breaker('bench'), calls));
live.close();

for (const [kind, socket] of [['hung', opts.hung], ['missing', opts.missing]]) {
  // The defaults: the first call pays the timeout (or the refusal), the rest fall within
  // the back-off.
  const c = new Client({ socket });
  c.on('unreachable', () => {});
  const b = c.breaker('bench');
  const [first] = await timed(b, 1);
  line(kind, await timed(b, calls / 2), `first_us=${(first / 1000).toFixed(1)} `);
  c.close();
}
