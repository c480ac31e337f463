// HTTP/1.1 as fuseboxd speaks it, with no I/O of its own. The client sends four small
// requests and reads answers that are always small and always carry a Content-Length;
// anything else is not fuseboxd answering, so the reader refuses it as Malformed
// instead of guessing, and the caller treats the sidecar as unable to decide.

import { Malformed } from './errors.js';

// Far above anything fuseboxd writes; a peer that sends more is not fuseboxd.
const MAX_HEAD = 16 * 1024;
const MAX_BODY = 64 * 1024;
const HEAD_END = Buffer.from('\r\n\r\n');

/** One request's bytes. */
export function encode(method, path, body = '') {
  let head = `${method} ${path} HTTP/1.1\r\nHost: fuseboxd\r\n`;
  if (method !== 'GET') head += `Content-Length: ${Buffer.byteLength(body)}\r\n`;
  if (body) head += 'Content-Type: application/json\r\n';
  return Buffer.from(`${head}\r\n${body}`, 'latin1');
}

/** The body of an answer as a JSON object, or Malformed. */
export function documentOf(answer) {
  let doc;
  try {
    doc = JSON.parse(answer.body.toString('utf8'));
  } catch (e) {
    throw new Malformed(`a ${answer.status} whose body is not JSON (${e.message})`);
  }
  if (doc === null || typeof doc !== 'object' || Array.isArray(doc)) {
    throw new Malformed(`a ${answer.status} whose body is JSON but not an object`);
  }
  return doc;
}

/** Reads one answer from the chunks fed to it. */
export class AnswerReader {
  #buf = Buffer.alloc(0);
  #status = 0;
  #headers = {};
  #length = -1;
  #keepAlive = false;

  /** The answer once it is whole, else null; Malformed as soon as it cannot be one. */
  feed(chunk) {
    this.#buf = this.#buf.length ? Buffer.concat([this.#buf, chunk]) : chunk;
    if (this.#length < 0) {
      const end = this.#buf.indexOf(HEAD_END);
      if (end < 0) {
        if (this.#buf.length > MAX_HEAD) throw new Malformed(`an answer whose head is over ${MAX_HEAD} bytes`);
        return null;
      }
      this.#head(this.#buf.subarray(0, end).toString('latin1'));
      this.#buf = this.#buf.subarray(end + 4);
    }
    if (this.#buf.length < this.#length) return null;
    return {
      status: this.#status,
      headers: this.#headers,
      body: this.#buf.subarray(0, this.#length),
      // Bytes after the answer were never asked for: the connection is not trusted again.
      keepAlive: this.#keepAlive && this.#buf.length === this.#length,
    };
  }

  #head(head) {
    const lines = head.split('\r\n');
    const m = /^(HTTP\/1\.[01]) (\d{3})(?: |$)/.exec(lines[0]);
    if (!m) throw new Malformed(`an answer that is not HTTP/1.1: ${JSON.stringify(lines[0].slice(0, 60))}`);
    this.#status = Number(m[2]);
    for (const line of lines.slice(1)) {
      const colon = line.indexOf(':');
      if (colon <= 0 || line[colon - 1] === ' ' || line[0] === ' ') {
        throw new Malformed(`a header line that is not one: ${JSON.stringify(line.slice(0, 60))}`);
      }
      this.#headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim();
    }
    if ('transfer-encoding' in this.#headers) {
      throw new Malformed('an answer with a Transfer-Encoding, which fuseboxd never sends');
    }
    let length = this.#headers['content-length'];
    if (length === undefined) {
      if (this.#status !== 204 && this.#status !== 304) throw new Malformed(`a ${this.#status} without a Content-Length`);
      length = '0';
    }
    if (!/^\d{1,6}$/.test(length) || Number(length) > MAX_BODY) {
      throw new Malformed(`an answer with the Content-Length ${JSON.stringify(length.slice(0, 20))}`);
    }
    this.#length = Number(length);
    this.#keepAlive = m[1] === 'HTTP/1.1' && (this.#headers.connection ?? '').toLowerCase() !== 'close';
  }
}
