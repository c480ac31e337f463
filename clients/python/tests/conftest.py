"""A real fuseboxd for the tests (the binary FUSEBOXD names, else built here with go), and
a lying one: a socket server that answers what fuseboxd never would."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import fusebox

REPO = Path(__file__).resolve().parents[3]

# A generous bound for what a loaded machine may take to start a daemon or load a config;
# the tests wait for the thing itself, never for a time.
PATIENCE_S = 30.0

# Clients of the real daemon in these tests wait far longer than an application's would,
# so that a busy machine never makes a healthy sidecar look hung.
PATIENT = {"timeout_ms": 10_000, "connect_timeout_ms": 10_000}


def eventually(what: str, cond: Callable[[], bool], bound_s: float = PATIENCE_S) -> None:
    deadline = time.monotonic() + bound_s
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {bound_s:.0f}s waiting for {what}")
        time.sleep(0.01)


@pytest.fixture(scope="session")
def fuseboxd_bin(tmp_path_factory: pytest.TempPathFactory) -> str:
    given = os.environ.get("FUSEBOXD")
    if given:
        return given
    go = shutil.which("go")
    if go is None:
        pytest.skip("FUSEBOXD is not set and go is not on PATH to build fuseboxd")
    out = tmp_path_factory.mktemp("bin") / "fuseboxd"
    subprocess.run([go, "build", "-o", str(out), "./cmd/fuseboxd"], cwd=REPO, check=True)
    return str(out)


class Daemon:
    """fuseboxd --config-dir, as the operator's published files would feed it."""

    def __init__(self, binary: str) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="fbpy"))
        self.socket = str(self.base / "fusebox.sock")
        self.config = self.base / "config"
        self.config.mkdir()
        self.proc = subprocess.Popen(
            [binary, "serve", "--socket", self.socket, "--config-dir", str(self.config)],
            stderr=subprocess.DEVNULL,
        )
        eventually("fuseboxd to be ready", lambda: self.proc.poll() is not None or _get_status(self.socket, "/readyz") == 200)
        assert self.proc.poll() is None, f"fuseboxd exited with {self.proc.returncode}"

    def publish(self, name: str, **fields: object) -> None:
        """Writes name's config as the mounted ConfigMap would hold it, and waits until the
        daemon serves that generation."""
        doc: dict[str, object] = {
            "name": name, "generation": 1, "openTimeout": "1s", "window": "10s",
            "failureRatio": 0.5, "minimumThroughput": 4, "successThreshold": 1,
            "halfOpenPermittedCalls": 1, "mode": "Enforce", "scope": "Pod",
        }
        doc.update(fields)
        tmp = self.config / f".tmp-{name}"
        tmp.write_text(json.dumps(doc))
        tmp.rename(self.config / f"{name}.json")
        with fusebox.Client(self.socket, **PATIENT) as client:
            b = client.breaker(name)
            eventually(f"fuseboxd to load {name}", lambda: b.describe().get("generation") == doc["generation"])

    def pause(self) -> None:
        """Stops the daemon (SIGSTOP) and waits until every thread of it has stopped, so
        that no request of the test's can still be served."""
        self.proc.send_signal(signal.SIGSTOP)
        eventually("fuseboxd to stop", lambda: _stopped(self.proc.pid))

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGCONT)
        self.proc.terminate()
        try:
            self.proc.wait(timeout=PATIENCE_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.base, ignore_errors=True)


def _stopped(pid: int) -> bool:
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except FileNotFoundError:
            continue
        if stat[stat.rindex(")") + 2] not in "Tt":
            return False
    return True


def _get_status(path: str, target: str) -> int:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect(path)
            s.sendall(f"GET {target} HTTP/1.1\r\nHost: fuseboxd\r\nConnection: close\r\n\r\n".encode())
            head = s.recv(64)
    except OSError:
        return 0
    parts = head.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


@pytest.fixture(scope="session")
def daemon(fuseboxd_bin: str) -> Iterator[Daemon]:
    """One daemon for the tests that each use breakers of their own names."""
    d = Daemon(fuseboxd_bin)
    yield d
    d.stop()


@pytest.fixture
def own_daemon(fuseboxd_bin: str) -> Iterator[Daemon]:
    """A daemon for one test, which may stop it."""
    d = Daemon(fuseboxd_bin)
    yield d
    d.stop()


class LyingSidecar:
    """Answers each request with the bytes its kind is given ("acquire", "release",
    "describe"); None closes the connection without answering. It counts what it was
    asked."""

    def __init__(self, answers: dict[str, bytes | None]) -> None:
        self.answers = answers
        self.asked: list[str] = []
        self.base = Path(tempfile.mkdtemp(prefix="fblie"))
        self.socket = str(self.base / "lying.sock")
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(self.socket)
        self._server.listen(16)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            buf = b""
            while True:
                while b"\r\n\r\n" not in buf:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                head, _, buf = buf.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                while len(buf) < length:
                    buf += conn.recv(65536)
                buf = buf[length:]
                method, target = head.split(b" ")[:2]
                kind = "acquire" if target.endswith(b"/permits") else "release" if target.startswith(b"/v1/permits/") else "describe"
                self.asked.append(kind)
                answer = self.answers.get(kind)
                if answer is None:
                    return
                conn.sendall(answer)

    def close(self) -> None:
        self._server.close()
        shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture
def lying() -> Iterator[Callable[[dict[str, bytes | None]], LyingSidecar]]:
    made: list[LyingSidecar] = []

    def make(answers: dict[str, bytes | None]) -> LyingSidecar:
        s = LyingSidecar(answers)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()
