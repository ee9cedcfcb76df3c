"""The resource monitor's PSS: a real process tree (a parent holding touched memory and
forked children sharing it, as DataLoader workers share their parent's pages), read through
/proc/<pid>/smaps_rollup; RSS where that cannot be read, said in the notes."""

import importlib.util
import subprocess
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from dlbench import aggregate, monitor
from dlbench import result as R

ALLOCATED = 200 * 2**20
CHILDREN = 3
ROOT = Path(__file__).resolve().parents[1]


def _benchmark():
    """benchmarks/monitor_pss.py: its process tree is the one measured here."""
    spec = importlib.util.spec_from_file_location("monitor_pss",
                                                  ROOT / "benchmarks" / "monitor_pss.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tree():
    proc = _benchmark().start_tree(ALLOCATED, CHILDREN)
    try:
        yield proc.pid
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def sample_of(pid):
    processes = monitor.ProcessTree(pid)
    processes.prime()
    return processes, processes.sample(time.perf_counter())


def test_a_forked_trees_pss_counts_shared_pages_once_where_its_rss_sum_counts_each(tree):
    """Four processes map the parent's 200 MB: the RSS sum counts it four times, the PSS
    sum once (each page divided among the processes mapping it)."""
    processes, s = sample_of(tree)
    assert s.processes == CHILDREN + 1
    assert s.rss_bytes >= 0.9 * ALLOCATED * (CHILDREN + 1)  # the overcount the PSS fixes
    assert 0.9 * ALLOCATED <= s.pss_bytes < 0.6 * s.rss_bytes
    assert processes.pss_unread == {}


def test_where_smaps_rollup_is_unreadable_a_process_counts_its_rss_and_a_note_says_so(
        tree, monkeypatch, tmp_path):
    """An older kernel, another platform, no permission: each process's RSS stands in for
    its PSS, and the summary's notes say so once, however many samples read it."""
    monkeypatch.setattr(monitor, "SMAPS_ROLLUP", str(tmp_path / "absent" / "{pid}"))
    processes, s = sample_of(tree)
    assert s.pss_bytes == pytest.approx(s.rss_bytes, rel=0.01)
    assert set(processes.pss_unread) == set(processes._procs)
    assert "FileNotFoundError" in processes.pss_unread[tree]

    mon = monitor.ResourceMonitor(10, pid=tree)
    for _ in range(2):  # two phases, every sample's PSS unreadable
        with mon:
            time.sleep(0.1)
    summary = mon.summary()
    lines = [n for n in summary["notes"] if "PSS unreadable" in n]
    assert lines == [lines[0]] and f"for {CHILDREN + 1} process(es)" in lines[0]
    assert "their RSS is counted in host_pss_bytes" in lines[0]
    assert summary["peak_host_pss_bytes"] == pytest.approx(summary["peak_host_rss_bytes"],
                                                           rel=0.01)


def test_pss_is_read_no_sooner_than_its_last_reading_took_over_its_share(tree, monkeypatch):
    """A share so small that the next reading would come after the phase: PSS is read as
    the phase starts and as it ends, outside its clock; RSS every sample. The peak is that
    of the readings made."""
    monkeypatch.setattr(monitor, "PSS_SHARE", 1e-9)
    mon = monitor.ResourceMonitor(10, pid=tree)
    with mon:
        time.sleep(0.3)
    series, summary = mon.series(), mon.summary()
    read = [v for v in series["host_pss_bytes"] if v is not None]
    assert None not in series["host_rss_bytes"]
    assert series["host_pss_bytes"][-1] is not None  # the phase's end
    assert series["host_pss_bytes"][0] is not None  # its start, read before its clock
    assert 1 <= len(read) <= 2 < summary["sample_count"]
    assert summary["host"]["pss_samples"] == len(read)
    assert summary["host"]["pss_peak_bytes"] == summary["peak_host_pss_bytes"] == max(read)


def write_result(path, mon_summary):
    res = R.new_result(kind="model", study="s", cell_id=path.stem,
                       cell={"framework": "pytorch", "model": "resnet18", "batch_size": 8,
                             "precision": "float32", "phase": "training", "device": "cpu",
                             "num_gpus": 1, "model_opts": {}})
    res["measurements"].append(R.measurement(name="m", pass_="training", times_s=[0.1, 0.2],
                                             items_per_iteration=8))
    res["extra"]["monitor"] = mon_summary
    R.finish(res, "ok", None)
    R.write(res, path)
    return path


def test_the_table_has_the_peak_pss_of_a_results_monitor_summary(tree, tmp_path):
    """The monitor's peak PSS is a column beside the peak RSS; null for a result recorded
    before the monitor read PSS."""
    mon = monitor.ResourceMonitor(10, pid=tree)
    with mon:
        time.sleep(0.05)
    summary = mon.summary()
    older = {k: v for k, v in summary.items() if k != "peak_host_pss_bytes"}
    files = [write_result(tmp_path / "new.json", summary),
             write_result(tmp_path / "older.json", older)]
    aggregate.write(files, tmp_path / "t.parquet", move_invalid=False)
    rows = {r["cell_id"]: r for r in pq.read_table(tmp_path / "t.parquet").to_pylist()}
    assert rows["new"]["peak_host_pss_bytes"] == summary["peak_host_pss_bytes"]
    pss = rows["new"]["peak_host_pss_bytes"]
    assert 0.9 * ALLOCATED <= pss < 0.6 * rows["new"]["peak_host_rss_bytes"]
    assert rows["older"]["peak_host_pss_bytes"] is None
    assert rows["older"]["peak_host_rss_bytes"] == summary["peak_host_rss_bytes"]
