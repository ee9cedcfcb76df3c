"""Progress of a run: cells done, and an estimate of the time left.

The estimate comes from the cells this run has finished: each remaining cell is expected
to take the wall time of comparable finished cells scaled by its own work (measured plus
warmup steps, times the batch), comparable meaning the same kind, framework, model,
phase, precision and device where such cells exist, else the same model, else any.
Timed cells run one at a time, so the times add up.

``Watcher`` runs in the workflow's main process (started by ``onstart``): it polls the
result files of the cells that had none at the start, prints one line to the terminal
as cells finish and keeps ``results/status.txt`` up to date for users on a cluster; its
last line says whether the run finished or stopped (``stop``). A row that records no time
(a skipped cell's, a failure row from before they recorded one) counts as done but is no
reference for the estimate.
"""

from __future__ import annotations

import json
import statistics
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from dlbench import stages
from dlbench.result import write_atomic

# From the most to the least alike: the parameters a reference cell must share.
SIMILARITY = (
    ("kind", "framework", "model", "phase", "precision", "device"),
    ("kind", "framework", "model", "precision", "device"),
    ("kind", "model"),
    ("kind",),
    (),
)


def work(kind: str, params: Mapping[str, Any]) -> float:
    """What a cell's wall time grows with: steps times samples per step."""
    if kind == "ops":
        return float(params.get("warmup", 0) + params.get("iterations", 1))
    steps = params.get("num_batches", 1) + params.get("num_warmup_batches", 0)
    return float(steps * params.get("batch_size", 1) * max(1, params.get("num_gpus", 1)))


@dataclass(frozen=True)
class Planned:
    kind: str
    params: Mapping[str, Any]

    def key(self, fields: Sequence[str]) -> tuple:
        values = {"kind": self.kind, **self.params}
        return tuple(json.dumps(values.get(f), sort_keys=True) for f in fields)


def estimate(cell: Planned, finished: Sequence[tuple[Planned, float | None]]) -> float | None:
    """Expected wall time of ``cell`` from finished (cell, wall seconds) pairs; a pair
    without a time (a row that records none) is no reference."""
    finished = [(ref, wall) for ref, wall in finished if wall is not None]
    for fields in SIMILARITY:
        key = cell.key(fields)
        refs = [(ref, wall) for ref, wall in finished if ref.key(fields) == key]
        if refs:
            target = work(cell.kind, cell.params)
            return statistics.median(wall * target / work(ref.kind, ref.params)
                                     for ref, wall in refs)
    return None


def time_left(remaining: Sequence[Planned], finished: Sequence[tuple[Planned, float | None]]
              ) -> float | None:
    """Sum of the remaining cells' estimates; None before any cell has finished with a
    recorded time."""
    if all(wall is None for _, wall in finished):
        return None
    return sum(estimate(cell, finished) or 0.0 for cell in remaining)


def duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def ending(succeeded: bool, missing: int) -> str:
    """How a run ended, in words: finished, or stopped with cells that have no result."""
    cells = f"{missing} cell{'s' if missing != 1 else ''} without a result"
    if succeeded:
        return f"run finished: {cells}" if missing else "run finished"
    return f"run stopped: {cells}" if missing else "run stopped"


def status_line(done: int, total: int, left: float | None, failed: int = 0,
                ended: str | None = None, running: int = 0) -> str:
    """The progress in one line; ``ended`` (``ending``) in place of the time left once the
    run is over; ``running``: cells started and not done (the rest wait for their turn or
    in a cluster's queue)."""
    text = f"dlbench: {done}/{total} cells done"
    if failed:
        text += f" ({failed} not ok)"
    if running and not ended:
        text += f", {running} running"
    if ended:
        text += f"; {ended}"
    elif done < total:
        text += ", time left unknown yet" if left is None else f", about {duration(left)} left"
    return text


def read_wall_time(path: Path) -> tuple[float | None, str] | None:
    """A finished result's time (its process's, start-up included: dlbench.stages; None
    where the row records none) and status; None while it is absent or partial."""
    try:
        data = json.loads(path.read_text())
        return stages.total_s(data), str(data.get("status"))
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def stamp(path: Path) -> tuple[int, int, int] | None:
    """What changes when a file is written (its mtime, size and inode); None where there is
    none. Comparing stamps, not mtimes with this host's clock, tells a file written during a
    run from one left by an earlier run whatever the clock of the file server or node that
    wrote it says."""
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_mtime_ns, info.st_size, info.st_ino


class Watcher:
    """Polls the planned cells' result files; says progress as they appear.

    ``log_of`` gives a result file's job log: a cell whose log was written during this run
    (its stamp differs from the one it had at the start) and which has no result yet is
    running (its job has started: on a cluster, it has left the queue). A job the scheduler
    ended without a result counts so until the run ends. ``also_watch`` names more files
    whose writing during the run ``written_during_run`` tells. The status file is rewritten
    as cells start and finish, and at least every ``refresh_s``, so that its time says the
    run is alive while cells wait in a queue; after ``stop`` it is not written again."""

    def __init__(self, planned: Mapping[Path, Planned], status_file: Path,
                 stream: TextIO | None = None, interval_s: float = 2.0,
                 clock: Callable[[], float] = time.time,
                 log_of: Callable[[Path], Path] | None = None, refresh_s: float = 60.0,
                 also_watch: Sequence[Path] = ()):
        self.planned = dict(planned)
        self.status_file = status_file
        self.stream = stream or sys.stderr
        self.interval_s = interval_s
        self.clock = clock
        self.log_of = log_of
        self.refresh_s = refresh_s
        self.started = clock()
        self.written = self.started
        self.finished: dict[Path, tuple[float | None, str]] = {}
        self.running = 0
        logs = [log_of(p) for p in self.planned] if log_of is not None else []
        self.stamps_at_start = {path: stamp(path) for path in [*logs, *also_watch]}
        self._stop = threading.Event()
        self._ended = False
        self._write_lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def written_during_run(self, path: Path) -> bool:
        """Whether ``path`` (a cell's log or one of ``also_watch``) was written since the
        watcher was made."""
        now = stamp(path)
        return now is not None and now != self.stamps_at_start.get(path)

    def poll(self) -> bool:
        """Read newly finished cells; True when any finished since the last poll."""
        new = False
        for path in self.planned:
            if path not in self.finished and path.exists():
                got = read_wall_time(path)
                if got is not None:
                    self.finished[path] = got
                    new = True
        return new

    def poll_running(self) -> bool:
        """Count the cells running now; True when the count changed."""
        if self.log_of is None:
            return False
        running = sum(1 for path in self.planned
                      if path not in self.finished
                      and self.written_during_run(self.log_of(path)))
        changed, self.running = running != self.running, running
        return changed

    def report(self, ended: str | None = None) -> str:
        finished = [(self.planned[p], wall) for p, (wall, _) in self.finished.items()]
        remaining = [c for p, c in self.planned.items() if p not in self.finished]
        failed = sum(1 for _, status in self.finished.values() if status != "ok")
        line = status_line(len(self.finished), len(self.planned), time_left(remaining, finished),
                           failed, ended, self.running)
        # A poll still running when the run ended must not write over its last line.
        with self._write_lock:
            if self._ended:
                return line
            self._ended = ended is not None
            self.written = self.clock()
            elapsed = duration(self.written - self.started)
            write_atomic(self.status_file, f"{line} (elapsed {elapsed}; updated "
                         f"{time.strftime('%Y-%m-%d %H:%M:%S')})\n")
        return line

    def tick(self) -> None:
        """One poll: a line where cells finished; the status file alone where cells
        started, or where it is older than refresh_s."""
        finished = self.poll()
        started = self.poll_running()
        if self._stop.is_set():  # the run ended while this poll ran: stop says the rest
            return
        if finished:
            print(self.report(), file=self.stream, flush=True)
        elif started or self.clock() - self.written >= self.refresh_s:
            self.report()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.tick()

    def start(self) -> None:
        self.report()
        self._thread = threading.Thread(target=self._loop, name="dlbench-progress", daemon=True)
        self._thread.start()

    def stop(self, succeeded: bool) -> str:
        """The last line, saying how the run ended (``succeeded``: Snakemake's onsuccess,
        else onerror: a failed job or an interrupt), so that the status file does not read
        as if the run were still going."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.poll()
        missing = len(self.planned) - len(self.finished)
        return self.report(ending(succeeded, missing))


# -- before a run: which pending cells run in a precision this CPU emulates -------------------


def probe_slowdowns(python: str, cache_dir: Path) -> dict[str, float]:
    """float32 matmul rate over each reduced precision's on this CPU (``python -m dlbench.cpu
    --probe`` in the framework's interpreter), remembered per CPU and interpreter."""
    import hashlib
    import subprocess

    from dlbench import cpu

    info = cpu.this_cpu()
    key = hashlib.sha256(json.dumps([python, info.model if info else "", sorted(
        info.flags) if info else []]).encode()).hexdigest()[:16]
    cached = cache_dir / f"precision-probe-{key}.json"
    try:
        rates = json.loads(cached.read_text())
    except (OSError, ValueError):
        try:
            out = subprocess.run([python, "-m", "dlbench.cpu", "--probe"], capture_output=True,
                                 text=True, timeout=120, check=True)
            rates = json.loads(out.stdout)["matmul_gflops"]
        except (OSError, subprocess.SubprocessError, ValueError, KeyError):
            return {}
        write_atomic(cached, json.dumps(rates) + "\n")
    base = rates.get("float32")
    return {name: base / rate for name, rate in rates.items()
            if name != "float32" and base and rate}


def emulation_notices(cells: Sequence[Any], slowdowns: Mapping[str, float],
                      cpu_words: str) -> list[str]:
    """One line per study with pending emulated-precision cells (``study.Cell`` objects)."""
    by_study: dict[str, list[Any]] = {}
    for cell in cells:
        by_study.setdefault(cell.study, []).append(cell)
    lines = []
    for study, group in by_study.items():
        precisions = sorted({c.params["precision"] for c in group})
        measured = {p: slowdowns[p] for p in precisions if p in slowdowns}
        factors = ", ".join(f"{p} ~{v:.0f}x" if v >= 10 else f"{p} ~{v:.2g}x"
                            for p, v in measured.items())
        if not measured:
            expect = "expect them to run tens of times slower than float32"
        elif max(measured.values()) >= 2:
            expect = (f"expect them to run far slower than float32 (matmul measured here: "
                      f"{factors} slower)")
        else:  # the flags say emulated, the probe says otherwise (a CPU flag list given)
            expect = f"matmul measured here takes {factors} float32's time"
        lines.append(f"dlbench: study '{study}': {len(group)} cell(s) in "
                     f"{' and '.join(precisions)}, which this CPU ({cpu_words}) emulates: "
                     f"{expect}; 'precisions: native' in the study skips them")
    return lines
