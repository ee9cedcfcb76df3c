"""CPU time the host takes from a cell (dlbench.host_contention): the hypervisor's steal
from /proc/stat, a cgroup's throttling from its cpu.stat (v2 and v1), read by the resource
monitor at the phase's start and end, carried to the table and the report. The files are
written here as the kernel lays them out; this machine's own are read once too."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from dlbench import host_contention as hc
from dlbench import monitor


def proc_stat(folder: Path, steal: int, total_other: int) -> None:
    # user nice system idle iowait irq softirq steal guest guest_nice
    user = total_other - 400
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "stat").write_text(f"cpu  {user} 0 100 300 0 0 0 {steal} 50 0\ncpu0 1 2 3\n")


def test_steal_is_the_share_of_the_hosts_cpu_time_and_throttling_the_cgroups_stops(tmp_path):
    proc = tmp_path / "proc"
    stat = tmp_path / "cpu.stat"
    proc_stat(proc, steal=100, total_other=9_900)
    stat.write_text("usage_usec 10\nnr_periods 50\nnr_throttled 2\nthrottled_usec 5000\n")
    start = hc.read(proc, stat)
    assert start == hc.Counters(100, 10_000, 2, 5000.0)  # guest time is inside user's
    proc_stat(proc, steal=400, total_other=11_600)
    stat.write_text("usage_usec 99\nnr_periods 90\nnr_throttled 9\nthrottled_usec 305000\n")
    taken = hc.taken(start, hc.read(proc, stat))
    assert taken == {"cpu_steal_fraction": pytest.approx(300 / 2000),
                     "cpu_throttled_s": pytest.approx(0.3), "cpu_throttled_periods": 7}
    assert hc.note(taken) == (
        "CPU time taken away during the phase: the hypervisor took 15% of the host's CPU time "
        "(steal); the CPU quota of the cell's cgroup stopped its processes 7 times, 0.30 s in "
        "all (throttling): its iterations include these waits")
    quiet = {"cpu_steal_fraction": 0.001, "cpu_throttled_s": 0.0, "cpu_throttled_periods": 0}
    assert hc.note(quiet) is None and not hc.notable(quiet)


def test_cgroup_v1_throttled_time_is_nanoseconds_and_missing_files_read_as_unknown(tmp_path):
    stat = tmp_path / "cpu.stat"
    stat.write_text("nr_periods 10\nnr_throttled 1\nthrottled_time 2500000000\n")
    assert hc.read(tmp_path / "no-proc", stat) == hc.Counters(None, None, 1, 2_500_000.0)
    unknown = hc.taken(hc.read(tmp_path / "no-proc"), hc.read(tmp_path / "no-proc"))
    assert unknown == {"cpu_steal_fraction": None, "cpu_throttled_s": None,
                       "cpu_throttled_periods": None} and hc.note(unknown) is None


def test_the_process_cgroup_file_is_found_for_either_hierarchy(tmp_path):
    proc, root = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text("0::/system.slice/job.scope\n")
    (root / "system.slice" / "job.scope").mkdir(parents=True)
    (root / "system.slice" / "job.scope" / "cpu.stat").write_text("nr_throttled 0\n")
    assert hc.cgroup_stat_path(proc, root) == root / "system.slice/job.scope/cpu.stat"
    (proc / "self" / "cgroup").write_text("4:memory:/x\n3:cpu,cpuacct:/slurm/job1\n")
    (root / "cpu,cpuacct" / "slurm" / "job1").mkdir(parents=True)
    (root / "cpu,cpuacct" / "slurm" / "job1" / "cpu.stat").write_text("nr_throttled 0\n")
    assert hc.cgroup_stat_path(proc, root) == root / "cpu,cpuacct/slurm/job1/cpu.stat"
    (proc / "self" / "cgroup").write_text("4:memory:/x\n")
    assert hc.cgroup_stat_path(proc, root) is None


def test_the_monitor_says_what_the_host_took_over_its_phase(monkeypatch):
    """Its summary carries the three figures and, where notable, a line in its notes;
    this machine's own counters read as numbers (or unknown), never an error."""
    readings = iter([hc.Counters(0, 1000, 0, 0.0), hc.Counters(50, 2000, 3, 120_000.0)])
    monkeypatch.setattr(hc, "read", lambda proc=None, stat=None: next(readings))
    mon = monitor.ResourceMonitor(interval_ms=20)
    mon.start()
    mon.stop()
    summary = mon.summary()
    assert (summary["cpu_steal_fraction"], summary["cpu_throttled_s"],
            summary["cpu_throttled_periods"]) == (pytest.approx(0.05), pytest.approx(0.12), 3)
    assert any(n.startswith("CPU time taken away during the phase: the hypervisor took 5%")
               for n in summary["notes"])
    monkeypatch.undo()
    here = monitor.ResourceMonitor(interval_ms=20)
    here.start()
    here.stop()
    steal = here.summary()["cpu_steal_fraction"]
    assert steal is None or 0 <= steal <= 1


def test_the_table_and_the_report_list_the_runs_the_host_took_time_from(tmp_path):
    from dlbench import aggregate
    from dlbench.report import tables

    assert ("cpu_steal_fraction", aggregate.pa.float64()) in aggregate.MONITOR_COLUMNS
    assert aggregate.monitor_values({"monitor": {"cpu_steal_fraction": 0.2,
                                                 "cpu_throttled_s": 1.5}})[
        "cpu_throttled_s"] == 1.5
    frame = pd.DataFrame({
        "study": ["s", "s", "s"], "system": ["vm", "vm", "vm"], "cell_id": ["a", "b", "c"],
        "cell": ["vm/a", "vm/b", "vm/c"], "source": ["a.json", "b.json", "c.json"],
        "repeat": [0, 0, 0], "cpu_steal_fraction": [0.001, 0.31, None],
        "cpu_throttled_s": [0.0, 0.0, 2.5]})
    html = tables.contended_table(frame)
    assert html.count("<tr>") == 3  # the header, b and c; a's host was quiet
    assert "<td>31.0%</td>" in html and "<td>2.50</td>" in html
    assert html.index("vm/b") < html.index("vm/c")  # most stolen first
    assert tables.contended_table(frame.iloc[:1]) is None
