"""One Python worker calling an upstream through the pod's breaker, as each process of a
gunicorn or Celery pool would. Every worker asks the same fuseboxd, so the circuit one
worker's failures open is open for all of them at once.

    python3 worker.py --breaker payments-api --upstream http://127.0.0.1:8080/ \\
        [--socket /var/run/fusebox/fusebox.sock] [--timeout-ms 250] [--interval-ms 20] [--stop-file FILE]

Prints one line per call: the worker, the call, and what the caller got.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

try:
    import fusebox
except ImportError:  # not installed: the client from this repository
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "clients" / "python" / "src"))
    import fusebox


class UpstreamDown(Exception):
    pass


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--breaker", default="payments-api")
    p.add_argument("--upstream", default="http://127.0.0.1:8080/")
    p.add_argument("--socket", default=fusebox.DEFAULT_SOCKET)
    p.add_argument("--timeout-ms", type=int, default=250)
    p.add_argument("--interval-ms", type=int, default=20)
    p.add_argument("--stop-file")
    p.add_argument("--max-calls", type=int, default=1000)
    args = p.parse_args()

    breaker = fusebox.Client(args.socket, timeout_ms=args.timeout_ms).breaker(args.breaker)

    def quote() -> str:
        try:
            with urllib.request.urlopen(args.upstream, timeout=2) as answer:
                answer.read()
        except urllib.error.HTTPError as e:
            if e.code >= 500:
                raise UpstreamDown(f"upstream answered {e.code}") from None
            raise
        return "ok"

    def fallback(cause: Exception) -> str:
        if isinstance(cause, fusebox.CircuitOpen):
            return f"fallback reason={cause.reason}"
        return "fallback reason=failed"

    worker = os.getpid()
    for i in range(1, args.max_calls + 1):
        if args.stop_file and os.path.exists(args.stop_file):
            break
        answer = breaker.call(fallback=fallback, close=quote)
        print(f"worker={worker} call={i} answer={answer}", flush=True)
        time.sleep(args.interval_ms / 1000)


if __name__ == "__main__":
    main()
