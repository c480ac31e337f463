// A real fuseboxd for the tests (the binary FUSEBOXD names, else built here with go), and
// a lying one: a socket server that answers what fuseboxd never would.

import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync, mkdirSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client } from '../src/index.js';

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');

// A generous bound for what a loaded machine may take to start a daemon or load a
// config; the tests wait for the thing itself, never for a time.
export const PATIENCE_MS = 30_000;

// Clients of the real daemon wait far longer than an application's would, so that a busy
// machine never makes a healthy sidecar look hung.
export const PATIENT = { timeoutMs: 10_000, connectTimeoutMs: 10_000 };

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export async function eventually(what, cond, boundMs = PATIENCE_MS) {
  const deadline = Date.now() + boundMs;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${boundMs / 1000}s waiting for ${what}`);
    await sleep(10);
  }
}

let built = null;

function fuseboxdBinary() {
  if (process.env.FUSEBOXD) return process.env.FUSEBOXD;
  if (built === null) {
    built = path.join(mkdtempSync(path.join(tmpdir(), 'fbnode-bin')), 'fuseboxd');
    execFileSync('go', ['build', '-o', built, './cmd/fuseboxd'], { cwd: REPO, stdio: 'inherit' });
  }
  return built;
}

/** fuseboxd --config-dir, as the operator's published files would feed it. */
export class Daemon {
  static async start() {
    const d = new Daemon();
    await eventually('fuseboxd to be ready', async () => d.proc.exitCode !== null || (await statusOf(d.socket, '/readyz')) === 200);
    if (d.proc.exitCode !== null) throw new Error(`fuseboxd exited with ${d.proc.exitCode}`);
    return d;
  }

  constructor() {
    this.base = mkdtempSync(path.join(tmpdir(), 'fbnode'));
    this.socket = path.join(this.base, 'fusebox.sock');
    this.config = path.join(this.base, 'config');
    mkdirSync(this.config);
    this.proc = spawn(fuseboxdBinary(), ['serve', '--socket', this.socket, '--config-dir', this.config], { stdio: 'ignore' });
  }

  /** Writes name's config as the mounted ConfigMap would hold it, and waits until served. */
  async publish(name, fields = {}) {
    const doc = {
      name, generation: 1, openTimeout: '1s', window: '10s', failureRatio: 0.5, minimumThroughput: 4,
      successThreshold: 1, halfOpenPermittedCalls: 1, mode: 'Enforce', scope: 'Pod', ...fields,
    };
    const tmp = path.join(this.config, `.tmp-${name}`);
    writeFileSync(tmp, JSON.stringify(doc));
    renameSync(tmp, path.join(this.config, `${name}.json`));
    const client = new Client({ socket: this.socket, ...PATIENT });
    const b = client.breaker(name);
    await eventually(`fuseboxd to load ${name}`, async () => (await b.describe()).generation === doc.generation);
    client.close();
  }

  /** SIGSTOP, then waits until every thread has stopped, so no request can still be served. */
  async pause() {
    this.proc.kill('SIGSTOP');
    await eventually('fuseboxd to stop', () => stopped(this.proc.pid));
  }

  resume() {
    this.proc.kill('SIGCONT');
  }

  async stop() {
    if (this.proc.exitCode === null) {
      const exited = new Promise((resolve) => this.proc.once('exit', resolve));
      this.proc.kill('SIGCONT');
      this.proc.kill('SIGTERM');
      await exited;
    }
    rmSync(this.base, { recursive: true, force: true });
  }
}

function stopped(pid) {
  for (const task of readdirSync(`/proc/${pid}/task`)) {
    let stat;
    try {
      stat = readFileSync(`/proc/${pid}/task/${task}/stat`, 'latin1');
    } catch {
      continue;
    }
    if (!'Tt'.includes(stat[stat.lastIndexOf(')') + 2])) return false;
  }
  return true;
}

function statusOf(socketPath, target) {
  return new Promise((resolve) => {
    const s = net.createConnection({ path: socketPath });
    let head = '';
    s.setTimeout(5000, () => s.destroy());
    s.on('error', () => resolve(0));
    s.on('connect', () => s.write(`GET ${target} HTTP/1.1\r\nHost: fuseboxd\r\nConnection: close\r\n\r\n`));
    s.on('data', (chunk) => {
      head += chunk.toString('latin1');
    });
    s.on('close', () => {
      const m = /^HTTP\/1\.1 (\d{3})/.exec(head);
      resolve(m ? Number(m[1]) : 0);
    });
  });
}

/**
 * Answers each request with the bytes its kind is given ('acquire', 'release',
 * 'describe'); null closes the connection without answering. asked lists what it was
 * asked.
 */
export class LyingSidecar {
  static async start(answers) {
    const s = new LyingSidecar(answers);
    await new Promise((resolve, reject) => {
      s.server.once('error', reject);
      s.server.listen(s.socket, resolve);
    });
    return s;
  }

  constructor(answers) {
    this.answers = answers;
    this.asked = [];
    this.base = mkdtempSync(path.join(tmpdir(), 'fblie'));
    this.socket = path.join(this.base, 'lying.sock');
    this.connections = new Set();
    this.server = net.createServer((conn) => this.#serve(conn));
  }

  #serve(conn) {
    this.connections.add(conn);
    conn.on('close', () => this.connections.delete(conn));
    conn.on('error', () => {});
    let buf = Buffer.alloc(0);
    conn.on('data', (chunk) => {
      buf = Buffer.concat([buf, chunk]);
      for (;;) {
        const end = buf.indexOf('\r\n\r\n');
        if (end < 0) return;
        const head = buf.subarray(0, end).toString('latin1');
        const m = /\r\ncontent-length: *(\d+)/i.exec(head);
        const length = m ? Number(m[1]) : 0;
        if (buf.length < end + 4 + length) return;
        buf = buf.subarray(end + 4 + length);
        const target = head.split(' ')[1];
        const kind = target.endsWith('/permits') ? 'acquire' : target.startsWith('/v1/permits/') ? 'release' : 'describe';
        this.asked.push(kind);
        const answer = this.answers[kind];
        if (answer === null || answer === undefined) {
          conn.destroy();
          return;
        }
        conn.write(answer);
      }
    });
  }

  async close() {
    for (const c of this.connections) c.destroy();
    await new Promise((resolve) => this.server.close(resolve));
    rmSync(this.base, { recursive: true, force: true });
  }
}

/** An HTTP/1.1 answer's bytes. */
export function answer(status, body = '', headers = '') {
  const b = Buffer.from(body, 'latin1');
  return Buffer.concat([
    Buffer.from(`HTTP/1.1 ${status}\r\nContent-Type: application/json\r\n${headers}Content-Length: ${b.length}\r\n\r\n`, 'latin1'),
    b,
  ]);
}
