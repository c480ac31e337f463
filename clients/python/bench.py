"""What a call through the client costs: one call() (an acquire and its release) against
a live fuseboxd, and each call against a hung one and a missing socket (the back-off).
Run by cmd/fuseboxd's BenchmarkClients, which starts the daemons (docs/benchmarks.md):

    python3 bench.py --live SOCKET --hung SOCKET --missing PATH [--calls N]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "src"))

import fusebox  # noqa: E402


def percentile(sorted_ns: list[int], q: float) -> float:
    return sorted_ns[min(len(sorted_ns) - 1, int(q * len(sorted_ns)))] / 1000


def timed(b: fusebox.Breaker, calls: int) -> list[int]:
    took = []
    clock = time.perf_counter_ns
    for _ in range(calls):
        start = clock()
        b.call(close=lambda: None)
        took.append(clock() - start)
    return took


def line(kind: str, took: list[int], extra: str = "") -> None:
    s = sorted(took)
    p50, p99, mean = percentile(s, 0.5), percentile(s, 0.99), statistics.fmean(took) / 1000
    print(f"{kind} calls={len(took)} {extra}p50_us={p50:.1f} p99_us={p99:.1f} mean_us={mean:.1f}")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--live", required=True)
    p.add_argument("--hung", required=True)
    p.add_argument("--missing", required=True)
    p.add_argument("--calls", type=int, default=20000)
    args = p.parse_args()
    # The back-off's warning, once per client, is not what is measured.
    logging.getLogger("fusebox").setLevel(logging.ERROR)

    live = fusebox.Client(args.live).breaker("bench")
    timed(live, 1000)
    line("live", timed(live, args.calls))

    for kind, socket in (("hung", args.hung), ("missing", args.missing)):
        # The defaults: the first call pays the timeout (or the refusal), the rest fall
        # within the back-off.
        b = fusebox.Client(socket).breaker("bench")
        first = timed(b, 1)[0]
        line(kind, timed(b, args.calls // 2), f"first_us={first / 1000:.1f} ")


if __name__ == "__main__":
    main()
