"""What reading PSS costs the resource monitor: one ``ProcessTree.sample`` with and without it.

The tree: a parent holding ``--resident-gib`` (2 GiB) of touched memory and ``--children``
(4) forked children that share it, as DataLoader workers share their parent's pages. The
kernel answers ``/proc/<pid>/smaps_rollup`` by walking each process's page tables under
its mmap lock, so its cost grows with what the tree has resident. Samples with and without
PSS alternate, so that drift of the machine's load falls on both alike. The JSON gives
each one's median and spread (10th and 90th percentile, min and max) in ms, their ratio,
the PSS sample's share of the default sampling interval, how often the monitor would read
this tree's PSS (``monitor.PSS_SHARE``), and the tree's RSS and PSS sums (the RSS sum counts
the shared pages once per process).

    python benchmarks/monitor_pss.py --out results/benchmarks/monitor_pss.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from dlbench import monitor

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/_common, from anywhere
from _common import at_least, positive_float, positive_int, provenance  # noqa: E402

# The parent touches every page of its buffer (a fresh one is the kernel's shared zero
# page until written), forks children that touch nothing, says "up" and waits for its
# stdin to close; so do the children, so no process outlives the benchmark.
TREE = """
import os, sys
data = bytearray({size})
data[::4096] = b"\\1" * len(range(0, {size}, 4096))
for _ in range({children}):
    if os.fork() == 0:
        while os.read(0, 1):
            pass
        os._exit(0)
sys.stdout.write("up\\n")
sys.stdout.flush()
while os.read(0, 1):
    pass
"""


def start_tree(size: int, children: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", TREE.format(size=size, children=children)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    if proc.stdout.readline() != "up\n":
        proc.kill()
        raise SystemExit("monitor_pss: the process tree did not start")
    return proc


def figures(ms: list[float]) -> dict[str, float]:
    ordered = sorted(ms)
    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(len(ordered) * q))]
    return {"median_ms": statistics.median(ms), "p10_ms": at(0.1), "p90_ms": at(0.9),
            "min_ms": ordered[0], "max_ms": ordered[-1]}


def measure(tree: monitor.ProcessTree, rounds: int) -> dict[str, Any]:
    times: dict[bool, list[float]] = {True: [], False: []}
    last: dict[bool, monitor.TreeSample] = {}
    for r in range(rounds):
        for pss in ((True, False) if r % 2 == 0 else (False, True)):
            began = time.perf_counter()
            last[pss] = tree.sample(began, pss=pss)
            times[pss].append((time.perf_counter() - began) * 1000.0)
    per_process = []
    for pid in sorted(tree._procs):
        began = time.perf_counter()
        monitor.pss_bytes(pid)
        per_process.append((time.perf_counter() - began) * 1000.0)
    with_pss, without = figures(times[True]), figures(times[False])
    return {"with_pss": with_pss, "without_pss": without,
            "ratio_of_medians": with_pss["median_ms"] / without["median_ms"],
            "pss_read_ms_per_process": per_process,
            "processes": last[True].processes, "rss_sum_bytes": last[True].rss_bytes,
            "pss_sum_bytes": last[True].pss_bytes, "pss_unread": tree.pss_unread}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="JSON file to write")
    p.add_argument("--resident-gib", type=positive_float, default=2.0)
    p.add_argument("--children", type=at_least(0), default=4)
    p.add_argument("--rounds", type=positive_int, default=30, help="samples of each kind")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    load_before = os.getloadavg()
    proc = start_tree(int(args.resident_gib * 2**30), args.children)
    try:
        tree = monitor.ProcessTree(proc.pid)
        tree.prime()
        tree.sample(time.perf_counter())  # the children found, every clock started
        result = measure(tree, args.rounds)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=60)
    interval_ms = monitor.DEFAULT_INTERVAL_MS
    pss_ms = result["with_pss"]["median_ms"] - result["without_pss"]["median_ms"]
    report = {
        "benchmark": "monitor_pss", "resident_gib": args.resident_gib,
        "children": args.children, "rounds": args.rounds, **result,
        "default_interval_ms": interval_ms,
        "pss_sample_share_of_interval": result["with_pss"]["median_ms"] / interval_ms,
        # How often the monitor reads this tree's PSS (it paces itself: monitor.PSS_SHARE)
        "pss_share": monitor.PSS_SHARE,
        "seconds_between_pss_reads": pss_ms / 1000.0 / monitor.PSS_SHARE,
        **provenance(),
        "machine": {"kernel": platform.release(), "loadavg_before": load_before,
                    "loadavg_after": os.getloadavg()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: report[k] for k in ("with_pss", "without_pss", "ratio_of_medians",
                                             "rss_sum_bytes", "pss_sum_bytes")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
