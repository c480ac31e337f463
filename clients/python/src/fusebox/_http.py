"""HTTP/1.1 as fuseboxd speaks it, with no I/O of its own.

The client sends four requests, always small, and reads answers that are always small
and always carry a Content-Length. Anything else is not fuseboxd answering, so the
reader refuses it as Malformed instead of guessing, and the caller treats the sidecar as
unable to decide.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from urllib.parse import quote

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
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or parts[0] not in (b"HTTP/1.1", b"HTTP/1.0"):
            raise Malformed(f"an answer that is not HTTP/1.1: {lines[0][:60]!r}")
        if len(parts[1]) != 3 or not parts[1].isdigit():
            raise Malformed(f"an answer with the status {parts[1][:10]!r}")
        self._status = int(parts[1])
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep or not name or name != name.strip():
                raise Malformed(f"a header line that is not one: {line[:60]!r}")
            self._headers[name.decode("latin-1").lower()] = value.strip().decode("latin-1")
        if "transfer-encoding" in self._headers:
            raise Malformed("an answer with a Transfer-Encoding, which fuseboxd never sends")
        length = self._headers.get("content-length")
        if length is None:
            if self._status not in (204, 304):
                raise Malformed(f"a {self._status} without a Content-Length")
            length = "0"
        if not length.isdigit() or int(length) > MAX_BODY:
            raise Malformed(f"an answer with the Content-Length {length[:20]!r}")
        self._length = int(length)
        self._keep_alive = parts[0] == b"HTTP/1.1" and self._headers.get("connection", "").lower() != "close"
