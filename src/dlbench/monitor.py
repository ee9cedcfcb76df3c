"""Resource monitor: memory, utilisation, power and energy of a cell's measured phase.

A background thread samples at a fixed interval, from the start to the end of the measured
iterations: per GPU (NVML) power draw, energy counter, utilisation, memory used, SM clock,
temperature and the reasons its clock was held back (``dlbench.gpu_clocks``: power cap,
thermal, hardware slowdown; with the power limit and clocks it ran under); the RSS, PSS
(shared pages counted once, read less often: ``PSS_SHARE``) and CPU use of the runner's
process and all its descendants (psutil, ``/proc/<pid>/smaps_rollup``); the host's RAPL
energy counters where the machine exposes readable ones. Energy of the phase comes from
counters: a GPU's NVML total-energy counter, sampled with the rest (the difference between
its first and last good readings), and RAPL's, or from the power samples integrated over
time where a GPU has no energy counter.
A GPU's power between two samples comes from its energy counter where it has one: NVML's
power reading is an average over about a second on recent boards (H100), so in a phase of
a second or less it still shows the idle GPU before it, and its peak came out below the
phase's mean. Nothing is parsed from a tool's text output. When no source of energy
exists, the summary says so in ``energy_note`` and leaves ``energy_j`` null: never a zero.
An NVML reading that fails is missing from that sample only (NVML can answer Unknown,
Timeout or GpuIsLost for a moment under heavy load); it is asked for no more once NVML says
it never will be (not supported, no permission) or after FAILURES_IN_A_ROW failures in a
row, and the summary's ``notes`` say how many samples lack it.

The monitor knows no framework. A runner adopts it in two lines::

    mon = monitor.ResourceMonitor(args.monitor_interval_ms, gpus=[0])
    with mon:                          # around the measured iterations only
        ...
    monitor.attach(res, args.output, mon)   # summary -> res["extra"]["monitor"],
                                            # time series -> <result stem>.monitor.parquet

It also has ``measure_start`` / ``iteration_end`` / ``measure_end`` methods, so a loop
that runs warmup and measured iterations together can hand it over as a phase hook.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from dlbench import atomic, gpu_clocks, host_contention, staging

POWERCAP_ROOT = Path("/sys/class/powercap")
# Every 0.5 s: on a busy 2-core host, sampling every 0.1 s cost 1.4 % of throughput
# (benchmarks/monitor_overhead.py); NVML averages power over about a second anyway.
DEFAULT_INTERVAL_MS = 500.0
# An energy counter's power is taken over intervals no shorter than this: the counter moves
# in steps, so a few ms between two readings would give a spike or a zero.
SHORTEST_POWER_INTERVAL_S = 0.1
# A GPU energy counter's figure over a phase shorter than this is said to be uncertain:
# the counter moves in steps (NVML does not document their size; one of 0.1 s would be a
# tenth of a phase of one second).
SHORT_COUNTER_S = 1.0
# psutil walks /proc to find descendants; they rarely change during a measurement, so the
# list is refreshed at most this often to keep each sample cheap.
CHILDREN_REFRESH_S = 1.0
# A tree's PSS costs far more than the rest of a sample: the kernel walks every page table
# of every process in it (benchmarks/monitor_pss.py, 2 GiB resident in a parent and 4
# forked children on a 2-core VM: 210 to 240 ms against under 1 ms without PSS, about
# half of the default interval; 40 to 50 ms per process). How long depends on the host
# and on what the tree holds, so the sampler paces itself on what the last reading took:
# the next comes no sooner than that time over PSS_SHARE, so that PSS takes at most this
# share of one core in the phase, and the measured processes' mmap and munmap calls,
# which wait on the walk's lock, seldom find it held (the interpreter lock is free while
# the kernel walks). The sampler's first tick reads it (in its thread: a reading before
# the phase's clock started would hold up rank 0, and with it every rank's first measured
# iteration, of a data-parallel cell), and the phase's end is read after its clock has
# stopped: a measured loop's memory is mostly that of its first iteration, and the
# readings between catch what grows; a tree read every 100 s (2 GiB in 5 processes) has
# little more than those two. The peak is the highest reading made.
# benchmarks/monitor_overhead.py (a small CPU cell, phases of 6 to 13 s on 2 cores): the
# sampler's CPU share of the phase 0.35 to 0.73 %, against 0.17 % without PSS, nearly all
# of it the first tick's reading (less in a longer phase); 2.4 % at a share of 1 % with
# readings before the phase's start and after its end counted in it.
PSS_SHARE = 0.002
# A process's proportional set size (PSS): each page it maps divided by the number of
# processes mapping it, so that a tree's sum counts the pages forked loader workers share
# with their parent (copy-on-write memory, shared libraries: torch alone is hundreds of MB)
# once, where the RSS sum counts them once per process. Linux >= 4.14 sums it over the
# process's mappings here; a module constant so that a test can point it elsewhere.
SMAPS_ROLLUP = "/proc/{pid}/smaps_rollup"
GPU_FIELDS = ("power_w", "energy_mj", "utilization_percent", "memory_used_bytes",
              "sm_clock_mhz", "temperature_c", "clock_reasons")
ENERGY_FIELDS = ("energy_mj", "power_w")  # a GPU's energy comes from these (gpu_energy)
# NVML's answers (nvml.h's nvmlReturn_t, by the binding's names) that a reading will never
# succeed on this GPU and driver, so asking again each sample would only fail again. Any
# other error (Unknown, Timeout, GpuIsLost, InvalidArgument, ...) costs that sample its
# reading only: taking a brief error for a lasting one lost a cell's energy, while taking
# a lasting one for brief costs a few failed calls until FAILURES_IN_A_ROW.
PERMANENT_NVML_ERRORS = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_NO_PERMISSION",
                         "NVML_ERROR_FUNCTION_NOT_FOUND",
                         "NVML_ERROR_ARGUMENT_VERSION_MISMATCH", "NVML_ERROR_DEPRECATED")
# A reading that failed this many samples in a row is not asked for again. Three is past a
# brief error under load (1.5 s of failures at the default interval), and a reading that
# is gone for good (a GPU fallen off the bus) then costs three failed driver calls, each
# of which may wait on the driver, instead of one every sample to the end of the cell.
FAILURES_IN_A_ROW = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The runner flag that sets the sampling interval (0 turns the monitor off)."""
    parser.add_argument("--monitor_interval_ms", type=_interval, default=DEFAULT_INTERVAL_MS,
                        help="resource monitor sampling interval in ms during the measured "
                             f"iterations; 0 disables it (default: {DEFAULT_INTERVAL_MS:g})")


def _interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected milliseconds, got {text!r}") from None
    if value < 0 or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text!r}")
    return value


# Host processes (psutil)


class TreeSample(NamedTuple):
    """One sample of a process tree."""

    rss_bytes: int  # summed over its processes: a page shared by n of them counts n times
    cpu_percent: float  # percent of one core, summed
    processes: int
    # summed PSS (a shared page counted once over all); None where the sample did not read
    # it, or a process's PSS could not be read (``ProcessTree.pss_unread``)
    pss_bytes: int | None


class ProcessTree:
    """RSS, PSS and CPU use of one process and its descendants (loader workers, ranks)."""

    def __init__(self, pid: int | None = None) -> None:
        import psutil

        self._psutil = psutil
        self.root = psutil.Process(pid or os.getpid())
        self._procs: dict[int, Any] = {}
        self._refreshed_at = -math.inf
        # All the machine's cores: what the tree can use at most. Each process's share is
        # its CPU-time ticks (10 ms) over its own interval since the last sample, so on a
        # loaded host a short interval reads more than the process could use; their sum is
        # held to this.
        self.capacity = 100.0 * (psutil.cpu_count() or 1)
        # pid -> why its PSS could not be read in this phase (then it has no PSS figures)
        self.pss_unread: dict[int, str] = {}

    def prime(self) -> None:
        """Start the CPU-time clocks; the first sample then covers start to now."""
        self._procs = {}
        self._refreshed_at = -math.inf
        self.pss_unread = {}  # a phase's own: a process unreadable before may be gone
        self._refresh(time.perf_counter())

    def _refresh(self, now: float) -> None:
        if _PROC_CHILDREN:
            found = [self.root.pid, *_descendants(self.root.pid)]
        else:
            try:
                found = [self.root.pid, *(p.pid for p in self.root.children(recursive=True))]
            except self._psutil.Error:
                found = [self.root.pid]
        for pid in found:
            if pid not in self._procs:
                with contextlib.suppress(self._psutil.Error):
                    proc = self.root if pid == self.root.pid else self._psutil.Process(pid)
                    proc.cpu_percent(None)  # the first call only starts its clock
                    self._procs[pid] = proc
        self._refreshed_at = now

    def sample(self, now: float, *, pss: bool = True) -> TreeSample:
        """The tree's totals now; its PSS with ``pss`` only (it costs far more: see
        ``PSS_SHARE``)."""
        if now - self._refreshed_at >= CHILDREN_REFRESH_S:
            self._refresh(now)
        rss, cpu = 0, 0.0
        for pid, proc in list(self._procs.items()):
            try:
                with proc.oneshot():
                    rss += proc.memory_info().rss
                    cpu += proc.cpu_percent(None)
            except self._psutil.Error:  # exited (a finished worker) or no longer ours
                del self._procs[pid]
        return TreeSample(rss, min(cpu, self.capacity), len(self._procs),
                          self.pss() if pss else None)

    def pss(self) -> int | None:
        """The PSS summed over the processes the last sample found; None where a process's
        cannot be read (said in ``pss_unread``): a sum holding its RSS instead would pass
        for PSS in the table, where compare and the report take it for one."""
        total = 0
        for pid in list(self._procs):
            try:
                total += pss_bytes(pid)
            except ProcessLookupError:  # a zombie (a worker not yet reaped): no memory
                continue
            except (OSError, ValueError) as exc:  # an old kernel, no permission
                if not os.path.exists(f"/proc/{pid}"):  # exited since the last sample
                    del self._procs[pid]
                    continue
                self.pss_unread.setdefault(pid, f"{type(exc).__name__}: {exc}")
                return None
        return total


def pss_bytes(pid: int) -> int:
    """A process's proportional set size: the ``Pss:`` line of its ``SMAPS_ROLLUP`` (kB).

    The kernel walks the process's page tables to answer (under its mmap lock), so on a
    process with GBs resident this takes milliseconds (``benchmarks/monitor_pss.py``)."""
    path = SMAPS_ROLLUP.format(pid=pid)
    with open(path, "rb") as handle:
        for line in handle:
            if line.startswith(b"Pss:"):
                return int(line.split()[1]) * 1024
    raise ValueError(f"{path}: no Pss line")


def _descendants(pid: int) -> list[int]:
    """Descendant pids from /proc/<pid>/task/<tid>/children: reads only our own tree, where
    psutil's ``children()`` reads the parent of every process on the machine."""
    found: list[int] = []
    stack = [pid]
    while stack:
        parent = stack.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{parent}/task/{tid}/children") as handle:
                    children = [int(c) for c in handle.read().split()]
            except (OSError, ValueError):
                continue
            found += children
            stack += children
    return found


_PROC_CHILDREN = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


# Host energy (RAPL through the powercap sysfs interface)


class Rapl:
    """Package and DRAM energy counters of /sys/class/powercap/intel-rapl:*.

    Packages are the top-level zones; DRAM is a sub-zone outside its package's count, so
    both are summed. ``psys`` (whole platform) overlaps the packages and is left out. The
    counters wrap at ``max_energy_range_uj``; every read adds the wrapped difference.
    Since 2020 kernels let only root read ``energy_uj``: unreadable zones are skipped."""

    def __init__(self, root: Path = POWERCAP_ROOT) -> None:
        self.zones: list[tuple[str, Path, int]] = []  # (name, energy_uj file, wrap range)
        for zone in sorted(Path(root).glob("intel-rapl:*")):
            try:
                name = (zone / "name").read_text().strip()
                wrap = int((zone / "max_energy_range_uj").read_text())
                int((zone / "energy_uj").read_text())
            except (OSError, ValueError):
                continue
            top_level = zone.name.count(":") == 1
            if (top_level and name.startswith("package")) or name == "dram":
                self.zones.append((f"{zone.name}/{name}", zone / "energy_uj", wrap))
        self._last: list[int] = []
        self.energy_uj: list[int] = []

    def __bool__(self) -> bool:
        return bool(self.zones)

    def _read(self) -> list[int]:
        return [int(path.read_text()) for _, path, _ in self.zones]

    def reset(self) -> None:
        self._last = self._read()
        self.energy_uj = [0] * len(self.zones)

    def update(self) -> float:
        """Add what each counter advanced since the last read; total joules so far.

        A read that fails (a zone gone or unreadable mid-run) raises and leaves the last
        good read in place, so the next good read still counts the whole advance."""
        now = self._read()
        for i, (value, last) in enumerate(zip(now, self._last, strict=True)):
            delta = value - last
            if delta < 0:  # wrapped around
                delta += self.zones[i][2]
            self.energy_uj[i] += delta
        self._last = now
        return sum(self.energy_uj) / 1e6


# GPUs (NVML)


class NvmlGpus:
    """Per-GPU readings through NVML (nvidia-ml-py). ``ids`` are NVML indices, UUIDs
    (``GPU-...``/``MIG-...``) or PCI bus ids; a reading a GPU does not support is None,
    and so is one that failed in that sample (``failures`` says which and why)."""

    def __init__(self, ids: Sequence[int | str], nvml: Any = None) -> None:
        if nvml is None:
            import pynvml as nvml
        self.nvml = nvml
        nvml.nvmlInit()
        try:
            self.handles = [self._handle(i) for i in ids]
            self.names = [_text(nvml.nvmlDeviceGetName(h)) for h in self.handles]
        except nvml.NVMLError:
            self.close()
            raise
        self.ids = [str(i) for i in ids]
        self.indices = [self._call(nvml.nvmlDeviceGetIndex, h) for h in self.handles]
        self.settings = [gpu_clocks.settings(nvml, h) for h in self.handles]
        # NVMLError.value of the errors in PERMANENT_NVML_ERRORS that this binding names
        self._permanent = {getattr(nvml, name) for name in PERMANENT_NVML_ERRORS
                           if hasattr(nvml, name)}
        self._not_asked: set[tuple[int, str]] = set()
        self._answered: set[tuple[int, str]] = set()
        self._in_a_row: dict[tuple[int, str], int] = {}
        self._given_up: set[tuple[int, str]] = set()  # after failures in a row, not NVML's word
        # (gpu, field) -> why samples lack it: readings that failed after all, not those
        # a GPU never supported (MIG, older boards), which are simply None
        self.failures: dict[tuple[int, str], str] = {}

    def _handle(self, ident: int | str) -> Any:
        if isinstance(ident, int):
            return self.nvml.nvmlDeviceGetHandleByIndex(ident)
        if ident.startswith("GPU-"):
            try:
                return self.nvml.nvmlDeviceGetHandleByUUID(ident)
            except self.nvml.NVMLError:  # a MIG instance's UUID, as CUDA reports it
                return self.nvml.nvmlDeviceGetHandleByUUID("MIG-" + ident[4:])
        if ident.startswith("MIG-"):
            return self.nvml.nvmlDeviceGetHandleByUUID(ident)
        return self.nvml.nvmlDeviceGetHandleByPciBusId(ident)

    def _call(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except self.nvml.NVMLError:
            return None

    def _read(self, gpu: int, field: str) -> float | None:
        """One reading, or None: not supported, or failed in this sample."""
        key = (gpu, field)
        if key in self._not_asked:
            return None
        try:
            value = self._reading(gpu, field)
        except self.nvml.NVMLError as exc:
            self._failed(key, exc)
            return None
        self._answered.add(key)
        self._in_a_row.pop(key, None)
        return value

    def _failed(self, key: tuple[int, str], exc: Exception) -> None:
        """Count a failed reading; stop asking once NVML says it never will succeed or it
        failed FAILURES_IN_A_ROW samples in a row."""
        in_a_row = self._in_a_row[key] = self._in_a_row.get(key, 0) + 1
        error = f"{type(exc).__name__}: {exc}"
        if getattr(exc, "value", None) in self._permanent:
            self._not_asked.add(key)
            # not supported from the first: simply None, as on a MIG instance; after good
            # readings or other errors: samples lack it, said in the notes
            if key in self._answered or key in self.failures:
                self.failures[key] = f"{error}; not asked again"
        elif in_a_row >= FAILURES_IN_A_ROW:
            self._not_asked.add(key)
            self._given_up.add(key)
            self.failures[key] = f"{error}, {in_a_row} samples in a row; not asked again"
        else:
            self.failures[key] = error

    def ask_again(self) -> None:
        """The energy readings given up after failures in a row are asked for once more: at
        a phase's start and end, their readings bound the time its energy covers."""
        again = {key for key in self._given_up if key[1] in ENERGY_FIELDS}
        self._not_asked -= again
        self._given_up -= again
        for key in again:  # one more failure gives it up again, its note kept
            self._in_a_row[key] = FAILURES_IN_A_ROW - 1

    def _reading(self, gpu: int, field: str) -> float | None:
        nvml, h = self.nvml, self.handles[gpu]
        if field == "power_w":
            return nvml.nvmlDeviceGetPowerUsage(h) / 1000.0
        if field == "energy_mj":
            return float(nvml.nvmlDeviceGetTotalEnergyConsumption(h))
        if field == "utilization_percent":
            return float(nvml.nvmlDeviceGetUtilizationRates(h).gpu)
        if field == "memory_used_bytes":
            return float(nvml.nvmlDeviceGetMemoryInfo(h).used)
        if field == "sm_clock_mhz":
            return float(nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM))
        if field == "clock_reasons":  # a bit mask (exact as a float)
            mask = gpu_clocks.reasons(nvml, h)
            return float(mask) if mask is not None else None
        return float(nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU))

    def sample(self) -> list[dict[str, float | None]]:
        return [{f: self._read(g, f) for f in GPU_FIELDS} for g in range(len(self.handles))]

    def close(self) -> None:
        with contextlib.suppress(self.nvml.NVMLError):
            self.nvml.nvmlShutdown()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# The monitor


# What a monitor's figures cover, unless its user says otherwise (a runner that starts it
# through the harness's phase hooks).
MEASURED_WINDOW = "the measured iterations"


class ResourceMonitor:
    """Samples between ``start()`` and ``stop()`` (or inside ``with``) in a daemon thread.

    ``interval_ms`` 0 disables it: start/stop do nothing and the summary says so. ``gpus``
    are the devices the cell uses (NVML ids, see NvmlGpus); empty for a CPU cell. Sources
    that are missing (no NVIDIA driver, no psutil, no readable RAPL) are noted in the
    summary and their fields left out."""

    def __init__(self, interval_ms: float = DEFAULT_INTERVAL_MS, *,
                 gpus: Sequence[int | str] = (), pid: int | None = None,
                 powercap_root: Path = POWERCAP_ROOT, nvml: Any = None,
                 window: str = MEASURED_WINDOW) -> None:
        self.interval_s = max(0.0, float(interval_ms)) / 1000.0
        self.window = window
        self.enabled = self.interval_s > 0
        self.notes: list[str] = []
        self.processes: ProcessTree | None = None
        self.rapl: Rapl | None = None
        self.gpus: NvmlGpus | None = None
        self.requested_gpus = list(gpus)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._columns: dict[str, list[Any]] = {}
        self._sample_cost_s = 0.0
        self._t0 = self._t1 = 0.0
        self._pss_next = 0.0  # when the sampler next reads the tree's PSS (PSS_SHARE)
        self._rapl_j: float | None = None
        self._rapl_s = 0.0  # the time _rapl_j covers, from the phase's start
        # CPU time the host takes away (steal, a cgroup's throttling): read at the phase's
        # start and end (dlbench.host_contention).
        self._cgroup_stat = host_contention.cgroup_stat_path()
        self._contention_start: host_contention.Counters | None = None
        self._contention = dict(host_contention.UNKNOWN)
        if not self.enabled:
            return
        try:
            self.processes = ProcessTree(pid)
        except ImportError:
            self.notes.append("host processes: psutil is not installed")
        self.rapl = Rapl(powercap_root) or None
        if self.requested_gpus:
            try:
                self.gpus = NvmlGpus(self.requested_gpus, nvml)
            except ImportError:
                self.notes.append("GPUs: nvidia-ml-py (pynvml) is not installed")
            except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, bad id
                self.notes.append(f"GPUs: NVML unavailable ({exc})")

    # phase hooks (see the module docstring)
    def measure_start(self) -> None:
        self.start()

    def iteration_end(self) -> None:
        pass

    def measure_end(self) -> None:
        self.stop()

    def __enter__(self) -> ResourceMonitor:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        if not self.enabled or self._thread is not None:
            return
        self._columns = {}
        self._sample_cost_s = 0.0
        if self.processes:
            self.processes.prime()
        if self.rapl:
            try:
                self.rapl.reset()
            except (OSError, ValueError) as exc:  # readable when found, not now: no cell lost
                self.notes.append(f"host energy: its counters could not be read at the "
                                  f"start ({type(exc).__name__}: {exc}); not counted")
                self.rapl = None
        if self.gpus:
            self.gpus.ask_again()
        self._stop.clear()
        self._contention = dict(host_contention.UNKNOWN)
        self._contention_start = host_contention.read(stat=self._cgroup_stat)
        # The tree's PSS is first read at the sampler's first tick (PSS_SHARE), not here:
        # the ranks of a data-parallel cell would wait in their first measured iteration's
        # all-reduce for this one (rank 0's monitor walks every rank's page tables).
        self._t0 = self._pss_next = time.perf_counter()
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="dlbench-monitor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        if self.gpus:
            self.gpus.ask_again()
        self._sample()  # the phase's end, so counters, integrals and peaks cover all of it
        self._t1 = time.perf_counter()
        if self._contention_start is not None:
            self._contention = host_contention.taken(
                self._contention_start, host_contention.read(stat=self._cgroup_stat))
        # after the phase's clock has stopped: its time is in none of the phase's figures
        self._pss_into_last_row(self._read_pss(in_phase=False))
        self._rapl_j = self._host_energy_j() if self.rapl else None

    def close(self) -> None:
        self.stop()
        if self.gpus:
            self.gpus.close()

    def _loop(self) -> None:
        deadline = self._t0 + self.interval_s
        while not self._stop.wait(max(0.0, deadline - time.perf_counter())):
            self._sample()
            if time.perf_counter() >= self._pss_next:
                self._pss_into_last_row(self._read_pss())
            deadline += self.interval_s
            now = time.perf_counter()
            if deadline < now:  # a slow sample: skip the missed ticks instead of bursting
                deadline = now + self.interval_s

    def _append_row(self, row: Mapping[str, Any]) -> None:
        """Add one sample to every column, None where this sample has no reading, so
        the columns always stay the same length as ``t_s``."""
        rows_before = len(self._columns.get("t_s", []))
        for name in row.keys() - self._columns.keys():
            self._columns[name] = [None] * rows_before
        for name, values in self._columns.items():
            values.append(row.get(name))

    def _read_source(self, source: str, read: Callable[[], Any]) -> Any:
        """One source's reading, or None when it fails: a sampler thread that died would
        silently end the record, so a failure is noted once and sampling goes on."""
        try:
            return read()
        except Exception as exc:  # OSError, ValueError, NVMLError: all the same here
            note = f"{source}: a reading failed ({type(exc).__name__}: {exc}); left empty"
            if not any(n.startswith(f"{source}: a reading failed") for n in self.notes):
                self.notes.append(note)
            return None

    def _sample(self) -> None:
        began, cpu_began = time.perf_counter(), time.thread_time()
        row: dict[str, Any] = {"t_s": began - self._t0}
        if self.processes:
            rss, cpu, count, _ = self._read_source(
                "host processes",
                lambda: self.processes.sample(began, pss=False)) or (None,) * 4
            # PSS is read apart, after the row's other readings (_read_pss)
            row.update(host_rss_bytes=rss, host_pss_bytes=None, host_cpu_percent=cpu,
                       host_processes=count)
        if self.rapl:
            row["host_energy_j"] = self._read_source("host energy", self.rapl.update)
        if self.gpus:
            for i, reading in enumerate(self._read_source("GPUs", self.gpus.sample) or []):
                row.update({f"gpu{i}_{field}": value for field, value in reading.items()})
        self._append_row(row)
        # CPU time of this thread: what sampling takes from the measured work (waiting for
        # the interpreter lock is not counted; holding it is).
        self._sample_cost_s += time.thread_time() - cpu_began

    def _read_pss(self, *, in_phase: bool = True) -> int | None:
        """The tree's PSS, paced: the next reading comes no sooner than this one's time
        over PSS_SHARE. One in the phase is read after a sample's other readings, so that
        their times (and the counters' intervals) are not held up by it, and counts in the
        sampler's CPU time; the one after the phase's clock has stopped does not."""
        if not self.processes:
            return None
        began, cpu_began = time.perf_counter(), time.thread_time()
        value = self._read_source("host processes", self.processes.pss)
        self._pss_next = began + (time.perf_counter() - began) / PSS_SHARE
        if in_phase:
            self._sample_cost_s += time.thread_time() - cpu_began
        return value

    def _pss_into_last_row(self, value: int | None) -> None:
        rows = self._columns.get("host_pss_bytes")
        if rows:
            rows[-1] = value

    def series(self) -> dict[str, list[Any]]:
        """The samples as columns: t_s, host_*, gpu<i>_* (i in the order of ``gpus``)."""
        return {name: list(values) for name, values in self._columns.items()}

    def summary(self, items: float | None = None) -> dict[str, Any]:
        """Peaks, means, energy and ``items`` (samples processed) per joule."""
        if not self.enabled:
            return {"enabled": False, "energy_j": None,
                    "energy_note": "resource monitor disabled (--monitor_interval_ms 0)"}
        cols = self._columns
        duration = self._t1 - self._t0
        count = len(cols.get("t_s", []))
        out: dict[str, Any] = {
            "enabled": True, "interval_ms": self.interval_s * 1000.0,
            "duration_s": duration, "sample_count": count,
            "sampler_cpu_ms_mean": self._sample_cost_s / count * 1000.0 if count else None,
            "sampler_cpu_fraction": self._sample_cost_s / duration if duration > 0 else None,
        }
        out["host"] = self._host_summary(cols)
        energies = [gpu_energy(cols.get("t_s", []), cols.get(f"gpu{i}_energy_mj", []),
                               cols.get(f"gpu{i}_power_w", []))
                    for i in range(len(self.gpus.handles))] if self.gpus else []
        # A counter that did not move while its GPU drew power measured no step of it:
        # its 0 J is no figure (the GPU's power comes from its readings instead).
        still = [e.method == "nvml_total_energy" and e.joules == 0
                 and any((p or 0) > 0 for p in cols.get(f"gpu{i}_power_w", []))
                 for i, e in enumerate(energies)]
        energies = [GpuEnergy(None, None, e.seconds, None) if s else e
                    for e, s in zip(energies, still, strict=True)]
        still_ids = [self.gpus.ids[i] for i, s in enumerate(still) if s and self.gpus]
        out["gpus"] = [self._gpu_summary(cols, i, e) for i, e in enumerate(energies)]
        out["peak_host_rss_bytes"] = out["host"].get("rss_peak_bytes")
        out["peak_host_pss_bytes"] = out["host"].get("pss_peak_bytes")
        device_peaks = [g["memory_used_peak_bytes"] for g in out["gpus"]
                        if g["memory_used_peak_bytes"] is not None]
        out["peak_device_memory_bytes"] = max(device_peaks) if device_peaks else None
        out.update(_clocks_summary(out["gpus"]))
        out.update(self._energy_summary(out, duration, items, energies, still_ids))
        out["window"] = self.window
        if self.window != MEASURED_WINDOW:  # said with every figure, in the table too
            scope_energy_note(out, f"over {self.window}")
        out.update(self._contention)
        taken = host_contention.note(out)
        out["notes"] = [*self.notes, *self._pss_unread(), *self._missing_readings(),
                        *_short_phase(duration, energies), *([taken] if taken else [])]
        return out

    def _pss_unread(self) -> list[str]:
        """One line where some process's PSS could not be read: the phase has no PSS
        figures (a sum of the others' would leave that process out)."""
        unread = self.processes.pss_unread if self.processes else {}
        if not unread:
            return []
        pid, why = next(iter(unread.items()))
        return [f"host processes: PSS unreadable (pid {pid}: {why}); no PSS figures (the "
                "RSS sum counts shared pages once per process)"]

    def _missing_readings(self) -> list[str]:
        """One line per GPU reading that failed in some samples: how many lack it, why."""
        if not self.gpus:
            return []
        failures = self.gpus.failures
        count = len(self._columns.get("t_s", []))
        lines = []
        for i, field in sorted(failures, key=lambda key: (key[0], GPU_FIELDS.index(key[1]))):
            missing = sum(v is None for v in self._columns.get(f"gpu{i}_{field}", []))
            lines.append(f"GPU {self.gpus.ids[i]} {field}: {missing} of {count} samples "
                         f"missing ({failures[(i, field)]})")
        return lines

    def _host_energy_j(self) -> float | None:
        """The host's RAPL energy over the phase: the running total (from the counters read
        at its start) at its last sample, taken at its end; where that reading failed, at
        the last good one (``_uncounted`` says what it leaves out), not none at all."""
        readings = self._columns.get("host_energy_j", [])
        t = self._columns.get("t_s", [])
        last = next((k for k in range(len(readings) - 1, -1, -1) if readings[k] is not None),
                    None)
        if not last or last >= len(t):  # none, or the start's alone: no time covered
            self._rapl_s = 0.0
            return None
        self._rapl_s = t[last]
        return readings[last]

    def _uncounted(self, energies: Sequence[GpuEnergy]) -> list[str]:
        """What the energy leaves out of the sampled phase: a GPU's start or end, the
        host's end, where the readings there failed (their energy is not guessed)."""
        t = self._columns.get("t_s", [])
        if not t:
            return []
        phase = t[-1] - t[0]
        out = []
        host = self._columns.get("host_energy_j", [])
        if self._rapl_j is not None and host and host[-1] is None:
            last = max(k for k, v in enumerate(host) if v is not None)
            out.append(f"{phase - t[last]:.2f} s of the host's {phase:.2f} s (its RAPL "
                       "counters unread at the phase's end)")
        if not self.gpus:
            return out
        for i, energy in enumerate(energies):
            if energy.joules is not None and energy.unread:
                short = phase - energy.seconds
                source = ("energy counter" if energy.method == "nvml_total_energy"
                          else "power reading")
                out.append(f"{short:.2f} s of GPU {self.gpus.ids[i]}'s {phase:.2f} s (its "
                           f"{source} unread at the phase's {energy.unread})")
        return out

    def _host_summary(self, cols: Mapping[str, list[Any]]) -> dict[str, Any]:
        host: dict[str, Any] = {}
        rss = _present(cols.get("host_rss_bytes", []))
        if rss:
            # The first CPU reading has no interval behind it: leave it out.
            cpu = _present(cols["host_cpu_percent"][1:] or cols["host_cpu_percent"])
            mean = _interval_mean(cols["t_s"], cols["host_cpu_percent"])
            host.update(rss_peak_bytes=int(max(rss)),
                        cpu_percent_mean=_mean(cpu) if mean is None else mean,
                        cpu_percent_max=max(cpu, default=None),
                        processes_max=int(max(_present(cols["host_processes"]))))
        pss = _present(cols.get("host_pss_bytes", []))
        # Not every sample reads it (PSS_SHARE): the peak of those that did; none where a
        # process's PSS could not be read (the sum of the others' would leave it out).
        if pss and self.processes is not None and not self.processes.pss_unread:
            host.update(pss_peak_bytes=int(max(pss)), pss_samples=len(pss))
        if self.rapl:
            host["rapl_zones"] = [name for name, _, _ in self.rapl.zones]
            host["energy_j"] = self._rapl_j
        return host

    def _gpu_summary(self, cols: Mapping[str, list[Any]], i: int,
                     gpu: GpuEnergy) -> dict[str, Any]:
        assert self.gpus is not None
        def values(field: str) -> list[float]:
            return _present(cols.get(f"gpu{i}_{field}", []))

        power = values("power_w")
        energy, method = gpu.joules, gpu.method
        if method == "nvml_total_energy" and gpu.seconds > 0:
            # The counter's mean and its intervals' peak: NVML's lagging power reading is
            # kept in the series only.
            mean = energy / gpu.seconds
            counted = _interval_power(cols.get("t_s", []), cols.get(f"gpu{i}_energy_mj", []))
            # no interval figure (its readings failed): the highest draw is the mean at least
            peak = max(_present(counted), default=None) or max([*power, mean])
        else:
            mean, peak = _mean(power), max(power) if power else None
        mem, clock, util, temp = (values("memory_used_bytes"), values("sm_clock_mhz"),
                                  values("utilization_percent"), values("temperature_c"))
        return {
            "id": self.gpus.ids[i], "index": self.gpus.indices[i], "name": self.gpus.names[i],
            "power_mean_w": mean, "power_max_w": peak,
            "utilization_mean_percent": _mean(util),
            "memory_used_peak_bytes": int(max(mem)) if mem else None,
            "sm_clock_mean_mhz": _mean(clock), "temperature_max_c": max(temp) if temp else None,
            "energy_j": energy, "energy_method": method,
            "clocks": gpu_clocks.summarize(cols.get(f"gpu{i}_clock_reasons", [])),
            "settings": self.gpus.settings[i],
        }

    def _energy_summary(self, out: Mapping[str, Any], duration: float, items: float | None,
                        energies: Sequence[GpuEnergy],
                        still: Sequence[int | str] = ()) -> dict[str, Any]:
        """The phase's energy; none where a GPU's counter did not move (``still``)."""
        if still:
            gpus = ", ".join(str(g) for g in still)
            return {"energy_j": None, "energy_sources": [],
                    "energy_note": f"not measured: the energy counter of GPU {gpus} did not "
                                   f"move over the {duration:.2f} s phase (NVML's counter "
                                   "moves in steps; more measured iterations give a figure)",
                    "power_mean_w": None, "power_max_w": None,
                    "items": items, "samples_per_joule": None}
        uncounted = self._uncounted(energies)
        parts, sources, missing = [], [], list(uncounted)
        gpu_energies = [g["energy_j"] for g in out["gpus"]]
        gpus_counted = bool(gpu_energies) and all(e is not None for e in gpu_energies)
        if gpus_counted:
            parts.append(sum(gpu_energies))
            sources += sorted({f"gpu:{g['energy_method']}" for g in out["gpus"]})
        elif gpu_energies or self.requested_gpus:
            # A GPU cell's energy without its GPUs' is no energy of the cell: the host's
            # RAPL alone would make its samples per joule several times too high.
            why = ("a sampled GPU reports neither energy nor power" if gpu_energies
                   else "no NVML GPU")
            return {"energy_j": None, "energy_sources": [],
                    "energy_note": f"not available on this host: {why} (the host's RAPL "
                                   "energy alone would leave the GPUs out)",
                    "power_mean_w": None, "power_max_w": None,
                    "items": items, "samples_per_joule": None}
        if self._rapl_j is not None:
            parts.append(self._rapl_j)
            # Packages and DRAM, or the packages alone (many AMD hosts have no DRAM zone):
            # told apart, as dlbench compare compares energy of the same sources only.
            if any(name.endswith("/dram") for name, _, _ in self.rapl.zones):
                sources.append("host:rapl")
            else:
                sources.append("host:rapl-package")
                missing.append("no DRAM RAPL zone (the memory's energy is not counted)")
        else:
            missing.append("no readable RAPL counters")
        if not parts:
            if not self.requested_gpus:
                missing.insert(0, "no GPU sampled (CPU cell)")
            return {"energy_j": None, "energy_sources": [],
                    "energy_note": f"not available on this host: {' and '.join(missing)}",
                    "power_mean_w": None, "power_max_w": None,
                    "items": items, "samples_per_joule": None}
        energy = float(sum(parts))
        if uncounted:
            # Energy over part of the phase is not the phase's: no energy figure (its items
            # over it would overstate the samples per joule; every reader of the table
            # takes a run with energy_j for a whole one). The power drawn is still each
            # source's energy over the time it covers.
            missing.append("no energy figure (the counters cover part of the phase)")
            mean = sum(e.joules / e.seconds for e in energies
                       if e.joules is not None and e.seconds > 0) + (
                self._rapl_j / self._rapl_s if self._rapl_j is not None and self._rapl_s > 0
                else 0.0)
            return {"energy_j": None, "energy_sources": sources,
                    "energy_note": f"partial: {' and '.join(missing)}",
                    "power_mean_w": mean or None, "power_max_w": self._peak_power(gpus_counted),
                    "items": items, "samples_per_joule": None}
        return {"energy_j": energy, "energy_sources": sources,
                "energy_note": f"partial: {' and '.join(missing)}" if missing else None,
                "power_mean_w": energy / duration if duration > 0 else None,
                "power_max_w": self._peak_power(gpus_counted),
                "items": items,
                "samples_per_joule": items / energy if items and energy > 0 else None}

    def _peak_power(self, with_gpus: bool) -> float | None:
        """Highest total draw at one sample: the GPUs' power plus the host's RAPL power
        over the interval that ends there."""
        cols = self._columns
        t = cols.get("t_s", [])
        sources: list[Sequence[float | None]] = []
        if with_gpus and self.gpus:
            for i in range(len(self.gpus.handles)):
                counted = _interval_power(t, cols.get(f"gpu{i}_energy_mj", []))
                # A GPU's power at each sample: from its energy counter where it has one
                # (NVML's reading lags by about a second), over the interval the sample is
                # in, as the host's below.
                sources.append(_over_its_interval(counted)
                               if any(v is not None for v in counted)
                               else cols.get(f"gpu{i}_power_w", [None] * len(t)))
        host = cols.get("host_energy_j")
        if host:
            # The host's power over intervals of SHORTEST_POWER_INTERVAL_S at least, as a
            # GPU's (RAPL moves in steps too: a stop() reading 2 ms after the last sample
            # made one step a spike).
            sources.append(_over_its_interval(
                _interval_power(t, [None if h is None else h * 1000.0 for h in host])))
        # Only samples where every source has a figure: a missing reading counted as 0 W
        # would understate that sample's total (the first sample has no interval behind
        # it, so a counter gives it none).
        totals = [sum(source[k] for source in sources) for k in range(len(t))
                  if sources and all(source[k] is not None for source in sources)]
        return max(totals) if totals and any(totals) else None


def scope_energy_note(summary: dict[str, Any], scope: str) -> None:
    """Put ``scope`` (what the figures cover: "over the whole sweep", "node 0 of 2") before
    the summary's energy note, where it says so with every figure (and in the table)."""
    summary["energy_note"] = "; ".join(filter(None, [scope, summary.get("energy_note")]))


def _short_phase(duration: float, energies: Sequence[GpuEnergy]) -> list[str]:
    """A line where a GPU's energy counter measured a phase shorter than SHORT_COUNTER_S:
    the counter moves in steps, and its figure can be off by one, a large share of it."""
    if duration >= SHORT_COUNTER_S or not any(e.method == "nvml_total_energy"
                                             for e in energies):
        return []
    return [f"GPU energy over a {duration:.2f} s phase: NVML's energy counter moves in "
            f"steps, and over less than {SHORT_COUNTER_S:g} s one step can be a large share "
            "of the figure (more measured iterations make it firmer)"]


class GpuEnergy(NamedTuple):
    """A GPU's energy over the phase, how it was had, and the time it covers."""

    joules: float | None
    method: str | None  # "nvml_total_energy", "integrated_power", or None
    seconds: float  # from its first to its last good reading
    unread: str | None  # "start", "end" or "start and end" where readings there failed


def gpu_energy(t: Sequence[float], energy_mj: Sequence[Any],
               power_w: Sequence[Any]) -> GpuEnergy:
    """The difference between the energy counter's first and last good readings; without
    two of them (or with a counter that went back: a driver reload), the power readings
    integrated between the first and last good ones. A failed reading in between neither
    loses energy (the counter's next reading has it) nor adds any; one at the start or
    end shortens the time covered, said in ``unread``."""
    for method, readings in (("nvml_total_energy", energy_mj), ("integrated_power", power_w)):
        good = [k for k in range(min(len(t), len(readings))) if readings[k] is not None]
        if len(good) < 2:
            continue
        first, last = good[0], good[-1]
        if method == "nvml_total_energy":
            if readings[last] < readings[first]:
                continue
            joules = (readings[last] - readings[first]) / 1000.0
        else:
            joules = _trapezoid([t[k] for k in good], [readings[k] for k in good])
        ends = [name for name, unread in (("start", first > 0), ("end", last < len(t) - 1))
                if unread]
        return GpuEnergy(joules, method, t[last] - t[first], " and ".join(ends) or None)
    return GpuEnergy(None, None, 0.0, None)


def _over_its_interval(power: Sequence[float | None]) -> list[float | None]:
    """Each sample's power: that of the interval it is in (``_interval_power`` gives it at
    the sample ending each interval), a gap between good readings bridged; None before
    the first interval and after the last."""
    out: list[float | None] = [None] * len(power)
    following = None
    for k in range(len(power) - 1, 0, -1):
        following = power[k] if power[k] is not None else following
        out[k] = following
    return out


def _interval_power(t: Sequence[float], energy_mj: Sequence[Any],
                    shortest: float = SHORTEST_POWER_INTERVAL_S) -> list[float | None]:
    """Watts from an energy counter (mJ) over intervals of at least ``shortest`` seconds
    between its readings, each at the sample that ends its interval (None elsewhere). A
    last interval shorter than that joins the one before it: the counter moves in steps,
    and a reading a few ms after the last would make one step a spike. A counter that went
    back (a driver reload) gives no figure for that interval."""
    out: list[float | None] = [None] * len(t)
    read = [k for k in range(min(len(t), len(energy_mj))) if energy_mj[k] is not None]
    if len(read) < 2:
        return out
    bounds = [read[0]]
    for k in read[1:]:
        if t[k] - t[bounds[-1]] >= shortest:
            bounds.append(k)
    if bounds[-1] != read[-1]:  # the end's remainder joins the last interval
        if len(bounds) > 1:
            bounds[-1] = read[-1]
        else:
            bounds.append(read[-1])
    for a, b in zip(bounds, bounds[1:], strict=False):
        joules, seconds = (energy_mj[b] - energy_mj[a]) / 1000.0, t[b] - t[a]
        if joules >= 0 and seconds > 0:
            out[b] = joules / seconds
    return out


def _clocks_summary(gpus: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The cell's GPUs at a glance: the lowest power limit, and the share of samples the
    most held-back GPU spent below its clock, with its reasons."""
    limits = [g["settings"]["power_limit_w"] for g in gpus
              if g["settings"].get("power_limit_w") is not None]
    held = [g["clocks"] for g in gpus if g["clocks"]["held_back"] is not None]
    worst = max(held, key=lambda c: c["held_back"], default=None)
    return {"gpu_power_limit_w": min(limits, default=None),
            "gpu_clocks_held_back": worst["held_back"] if worst else None,
            "gpu_clock_reasons": worst["text"] if worst else None}


def _interval_mean(t: Sequence[float], values: Sequence[Any]) -> float | None:
    """The mean of readings that each cover the interval since the one before (a CPU
    percentage), weighted by those intervals: the CPU time over the time. A plain mean
    let a short interval's reading, quantised to the kernel's 10 ms ticks (a tick in 5 ms
    reads 200 %), count as much as a long one's. None without two readings."""
    num = den = 0.0
    for k in range(1, min(len(t), len(values))):
        dt = t[k] - t[k - 1]
        if values[k] is not None and dt > 0:
            num += values[k] * dt
            den += dt
    return num / den if den > 0 else None


def _present(values: Iterable[Any]) -> list[Any]:
    """The readings that exist (a failed or unsupported reading is None)."""
    return [v for v in values if v is not None]


def _mean(values: Sequence[float]) -> float | None:
    return float(sum(values) / len(values)) if values else None


def _trapezoid(t: Sequence[float], y: Sequence[float]) -> float:
    return float(sum((t[k] - t[k - 1]) * (y[k] + y[k - 1]) / 2.0 for k in range(1, len(t))))


# Recording the result


def nvml_ids(cuda_indices: Iterable[int]) -> list[int | str]:
    """NVML identifiers of CUDA device indices. CUDA numbers the devices that
    CUDA_VISIBLE_DEVICES lists, in its order; NVML sees them all, so map through it."""
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
               if v.strip()]
    ids: list[int | str] = []
    for index in cuda_indices:
        if index < len(visible):
            ident = visible[index]
            ids.append(int(ident) if ident.isdigit() else ident)
        else:
            ids.append(index)
    return ids


def series_path(output: str | os.PathLike[str]) -> Path:
    """``<result stem>.monitor.parquet`` beside the result, or ``.csv`` without pyarrow."""
    try:
        import pyarrow  # noqa: F401
        suffix = ".monitor.parquet"
    except ImportError:
        suffix = ".monitor.csv"
    output = staging.final_path(output)  # named after the cell's result, not its staging
    return output.with_name(output.stem + suffix)


def write_series(columns: Mapping[str, list[Any]], path: Path) -> Path:
    """Write the time series atomically (``dlbench.atomic``: temp file, fsync, rename)."""
    with atomic.temp_path(path) as tmp:
        if path.suffix == ".parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.table(dict(columns)), tmp)
        else:
            names = list(columns)
            with open(tmp, "w", newline="") as handle:
                writer = csv.writer(handle)
                writer.writerow(names)
                writer.writerows(zip(*(columns[n] for n in names), strict=True))
    return path


def items_of(measurements: Iterable[Mapping[str, Any]]) -> float:
    """Samples (items) the measured iterations processed, over all measurements."""
    return float(sum(m["items_per_iteration"] * m["iterations"] for m in measurements))


def attach(res: dict[str, Any], output: str | os.PathLike[str] | None, mon: ResourceMonitor,
           items: float | None = None) -> dict[str, Any]:
    """Put the monitor's summary in ``res["extra"]["monitor"]`` and its time series beside
    ``output``. ``items`` defaults to what the result's measurements processed."""
    mon.close()  # stops sampling and releases NVML; the samples stay
    summary = mon.summary(items_of(res["measurements"]) if items is None else items)
    summary["series_file"] = None
    if output and mon.enabled and mon.series().get("t_s"):
        summary["series_file"] = write_series(mon.series(), series_path(output)).name
    res.setdefault("extra", {})["monitor"] = summary
    return summary
