"""CPU time the host took away from a cell while it measured: the hypervisor's steal time
(``/proc/stat``: a virtual machine's CPUs waiting for the physical ones) and the cgroup's
throttling (``cpu.stat``: a container's or a job's CPU quota used up, its processes stopped
until the next period). Either lengthens iterations with waits that are not the cell's
work, and neither shows in the cell's own figures: a run on a busy cloud host can be
steady yet slow (its times multiples of the quota's period). Read by the resource monitor
at a phase's start and end; standard library only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

# A share of the CPUs' time the hypervisor took worth saying (a quiet host: well below).
NOTABLE_STEAL = 0.02
# /proc/stat's cpu line: user nice system idle iowait irq softirq steal (guest time is
# already inside user and nice).
_FIELDS = 8
_STEAL = 7


class Counters(NamedTuple):
    """Running totals at one moment; None where unreadable (no /proc/stat: not Linux; no
    cpu controller in the process's cgroup)."""

    steal_ticks: int | None
    total_ticks: int | None
    throttled_periods: int | None
    throttled_us: float | None


def _cpu_ticks(proc: Path) -> tuple[int | None, int | None]:
    try:
        first = (proc / "stat").read_text().splitlines()[0].split()
        ticks = [int(v) for v in first[1:1 + _FIELDS]]
    except (OSError, IndexError, ValueError):
        return None, None
    if first[0] != "cpu" or len(ticks) < _FIELDS:
        return None, None
    return ticks[_STEAL], sum(ticks)


def cgroup_stat_path(proc: Path = Path("/proc"), root: Path = Path("/sys/fs/cgroup")
                     ) -> Path | None:
    """This process's cgroup's cpu.stat: cgroup v2's unified hierarchy ("0::/path"), else
    v1's cpu controller ("N:cpu,cpuacct:/path"); None where it has none."""
    try:
        lines = (proc / "self" / "cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        number, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if number == "0" and controllers == "":
            candidate = root / path.lstrip("/") / "cpu.stat"
        elif "cpu" in controllers.split(","):
            candidate = root / controllers / path.lstrip("/") / "cpu.stat"
        else:
            continue
        if candidate.is_file():
            return candidate
    return None


def _throttling(stat: Path | None) -> tuple[int | None, float | None]:
    if stat is None:
        return None, None
    try:
        fields = dict(line.split()[:2] for line in stat.read_text().splitlines()
                      if len(line.split()) >= 2)
        periods = int(fields["nr_throttled"])
        # v2: microseconds; v1: throttled_time in nanoseconds
        us = (float(fields["throttled_usec"]) if "throttled_usec" in fields
              else float(fields["throttled_time"]) / 1000.0)
    except (OSError, KeyError, ValueError):
        return None, None
    return periods, us


def read(proc: Path = Path("/proc"), stat: Path | None = None) -> Counters:
    """The counters now; ``stat``: the cgroup's cpu.stat (``cgroup_stat_path``)."""
    steal, total = _cpu_ticks(proc)
    periods, us = _throttling(stat)
    return Counters(steal, total, periods, us)


# The figures of a phase not read (a monitor that never started one).
UNKNOWN: dict[str, Any] = {"cpu_steal_fraction": None, "cpu_throttled_s": None,
                           "cpu_throttled_periods": None}


def taken(start: Counters, end: Counters) -> dict[str, Any]:
    """Over the phase between the two readings: ``cpu_steal_fraction``, the share of the
    host's CPU time the hypervisor took; ``cpu_throttled_s`` and
    ``cpu_throttled_periods``, the time and the quota periods the cgroup was stopped (None
    where a reading is missing, or no time passed)."""
    out = dict(UNKNOWN)
    if None not in (start.steal_ticks, start.total_ticks, end.steal_ticks, end.total_ticks):
        total = end.total_ticks - start.total_ticks
        if total > 0:
            out["cpu_steal_fraction"] = max(0, end.steal_ticks - start.steal_ticks) / total
    if None not in (start.throttled_us, end.throttled_us, start.throttled_periods,
                    end.throttled_periods):
        out["cpu_throttled_s"] = max(0.0, end.throttled_us - start.throttled_us) / 1e6
        out["cpu_throttled_periods"] = max(0, end.throttled_periods - start.throttled_periods)
    return out


def notable(values: dict[str, Any]) -> bool:
    steal, throttled = values.get("cpu_steal_fraction"), values.get("cpu_throttled_s")
    return (steal is not None and steal >= NOTABLE_STEAL) or bool(throttled)


def note(values: dict[str, Any]) -> str | None:
    """One line where the host took time away from the phase (``notable``); None otherwise."""
    if not notable(values):
        return None
    parts = []
    steal = values.get("cpu_steal_fraction")
    if steal is not None and steal >= NOTABLE_STEAL:
        parts.append(f"the hypervisor took {steal:.0%} of the host's CPU time (steal)")
    if values.get("cpu_throttled_s"):
        parts.append(f"the CPU quota of the cell's cgroup stopped its processes "
                     f"{values['cpu_throttled_periods']} times, {values['cpu_throttled_s']:.2f} s "
                     "in all (throttling)")
    return ("CPU time taken away during the phase: " + "; ".join(parts)
            + ": its iterations include these waits")


def side_note(label: str, steal: float, throttled_s: float) -> str | None:
    """dlbench compare's line for a side whose host took CPU time from a run (the most it
    took from one: ``steal`` share, ``throttled_s``; NaN unknown), None otherwise: a slower
    side may be a busier host, not slower software."""
    parts = []
    if steal == steal and steal >= NOTABLE_STEAL:  # not NaN
        parts.append(f"steal up to {steal:.0%}")
    if throttled_s == throttled_s and throttled_s > 0:
        parts.append(f"throttled up to {throttled_s:.2f} s")
    if not parts:
        return None
    return f"{label}'s host took CPU time from its runs ({', '.join(parts)})"
