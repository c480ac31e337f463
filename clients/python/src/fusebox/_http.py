"""HTTP/1.1 as fuseboxd speaks it, with no I/O of its own.

The client sends four requests, always small, and reads answers that are always small
and always carry a Content-Length. Anything else is not fuseboxd answering, so the
reader refuses it as Malformed instead of guessing, and the caller treats the sidecar as
unable to decide.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from urllib.parse import quote

_STATUS_LINE = re.compile(r"HTTP/1\.([01]) (\d{3})(?: .*)?")

# Far above anything fuseboxd writes; a peer that sends more is not fuseboxd.
MAX_HEAD = 16 * 1024
MAX_BODY = 64 * 1024


class Malformed(Exception):
    """The answer is not one fuseboxd would write."""


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    # Whether the connection may carry the next request.
    keep_alive: bool

    def document(self) -> dict[str, object]:
        """The body as a JSON object, or Malformed."""
        try:
            doc = json.loads(self.body)
        except (ValueError, UnicodeDecodeError) as e:
            raise Malformed(f"a {self.status} whose body is not JSON ({e})") from None
        if not isinstance(doc, dict):
            raise Malformed(f"a {self.status} whose body is JSON but not an object")
        return doc


def path_segment(value: str) -> str:
    """value escaped for one path segment: a name fuseboxd cannot serve then reaches it
    intact, to be refused with a 400, instead of breaking the request line."""
    return quote(value, safe="")


def encode(method: str, path: str, body: bytes = b"") -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: fuseboxd\r\n"
    if method != "GET":
        head += f"Content-Length: {len(body)}\r\n"
    if body:
        head += "Content-Type: application/json\r\n"
    return (head + "\r\n").encode("ascii") + body


class Reader:
    """Reads one answer from the bytes fed to it."""

    __slots__ = ("_buf", "_status", "_headers", "_length", "_keep_alive")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._status = 0
        self._headers: dict[str, str] = {}
        self._length = -1
        self._keep_alive = False

    def feed(self, data: bytes) -> Answer | None:
        """The answer once it is whole, else None; Malformed as soon as it cannot be one."""
        self._buf += data
        if self._length < 0:
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buf) > MAX_HEAD:
                    raise Malformed(f"an answer whose head is over {MAX_HEAD} bytes")
                return None
            self._head(bytes(self._buf[:end]))
            del self._buf[: end + 4]
        if len(self._buf) < self._length:
            return None
        body = bytes(self._buf[: self._length])
        # Bytes after the answer were never asked for: the connection is not trusted again.
        keep = self._keep_alive and len(self._buf) == self._length
        return Answer(self._status, self._headers, body, keep)

    def _head(self, head: bytes) -> None:
        status_line, _, rest = head.decode("latin-1").partition("\r\n")
        m = _STATUS_LINE.fullmatch(status_line)
        if m is None:
            raise Malformed(f"an answer that is not HTTP/1.1: {status_line[:60]!r}")
        self._status = int(m.group(2))
        headers = self._headers
        for line in rest.split("\r\n") if rest else ():
            name, sep, value = line.partition(":")
            if not sep or not name or name[-1] in " \t" or name[0] in " \t":
                raise Malformed(f"a header line that is not one: {line[:60]!r}")
            headers[name.lower()] = value.strip()
        if "transfer-encoding" in headers:
            raise Malformed("an answer with a Transfer-Encoding, which fuseboxd never sends")
        length = headers.get("content-length")
        if length is None:
            if self._status not in (204, 304):
                raise Malformed(f"a {self._status} without a Content-Length")
            length = "0"
        if not length.isdigit() or len(length) > 6 or int(length) > MAX_BODY:
            raise Malformed(f"an answer with the Content-Length {length[:20]!r}")
        self._length = int(length)
        self._keep_alive = m.group(1) == "1" and headers.get("connection", "").lower() != "close"
