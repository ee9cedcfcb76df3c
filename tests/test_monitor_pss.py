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


def test_where_smaps_rollup_is_unreadable_there_is_no_pss_figure_and_a_note_says_so(
        tree, monkeypatch, tmp_path):
    """An older kernel, another platform, no permission: no PSS figure (an RSS in its place
    would pass for PSS where compare and the report read the column), and the summary's
    notes say so once, however many samples tried."""
    monkeypatch.setattr(monitor, "SMAPS_ROLLUP", str(tmp_path / "absent" / "{pid}"))
    processes, s = sample_of(tree)
    assert s.pss_bytes is None
    assert "FileNotFoundError" in processes.pss_unread[tree]

    mon = monitor.ResourceMonitor(10, pid=tree)
    for _ in range(2):  # two phases, every sample's PSS unreadable
        with mon:
            time.sleep(0.1)
    summary = mon.summary()
    lines = [n for n in summary["notes"] if "PSS unreadable" in n]
    assert lines == [lines[0]] and "no PSS figures" in lines[0]
    assert summary["peak_host_pss_bytes"] is None and summary["peak_host_rss_bytes"]
    assert "pss_peak_bytes" not in summary["host"]


def test_pss_is_read_no_sooner_than_its_last_reading_took_over_its_share(tree, monkeypatch):
    """A share so small that the next reading would come after the phase: PSS is read at
    the sampler's first tick and as the phase ends, after its clock; RSS every sample. The
    peak is that of the readings made."""
    monkeypatch.setattr(monitor, "PSS_SHARE", 1e-9)
    mon = monitor.ResourceMonitor(10, pid=tree)
    with mon:
        time.sleep(0.3)
    series, summary = mon.series(), mon.summary()
    read = [v for v in series["host_pss_bytes"] if v is not None]
    assert None not in series["host_rss_bytes"]
    assert series["host_pss_bytes"][0] is None  # the start: no rank waits for a reading
    assert series["host_pss_bytes"][1] is not None  # the first tick's
    assert series["host_pss_bytes"][-1] is not None  # the phase's end
    assert len(read) == 2 < summary["sample_count"]
    assert summary["host"]["pss_samples"] == len(read)
    assert summary["host"]["pss_peak_bytes"] == summary["peak_host_pss_bytes"] == max(read)


def test_at_a_share_of_one_pss_is_read_at_every_tick_and_counted_in_the_samplers_time(
        tree, monkeypatch):
    """The sampler's own readings in the phase count in its CPU time; the one after the
    phase's clock has stopped does not."""
    monkeypatch.setattr(monitor, "PSS_SHARE", 1.0)
    mon = monitor.ResourceMonitor(10, pid=tree)
    with mon:
        time.sleep(0.3)
    series = mon.series()["host_pss_bytes"]
    assert None not in series[1:] and len(series) > 5
    spent = []
    for share in (1.0, 1e-9):
        monkeypatch.setattr(monitor, "PSS_SHARE", share)
        with mon:
            time.sleep(0.3)
        spent.append(mon.summary()["sampler_cpu_ms_mean"])
    assert spent[0] > spent[1]


def test_a_reading_of_pss_is_outside_the_phases_energy_and_time(tree, monkeypatch,
                                                                 tmp_path):
    """No reading of PSS is in the phase's time or host energy but the sampler's own (a 2
    GiB tree: 0.2 s a reading): a RAPL counter that moves while PSS is read at the phase's
    end, or where a reading came before its start, adds nothing to the phase's."""
    zone = tmp_path / "intel-rapl:0"
    zone.mkdir()
    (zone / "name").write_text("package-0\n")
    (zone / "max_energy_range_uj").write_text("262143328850\n")
    counter = [0]

    def spend(joules):
        counter[0] += int(joules * 1e6)
        (zone / "energy_uj").write_text(f"{counter[0]}\n")

    spend(0)
    read = monitor.ProcessTree.pss

    def costly(self):
        spend(20.0)
        return read(self)

    monkeypatch.setattr(monitor.ProcessTree, "pss", costly)
    mon = monitor.ResourceMonitor(1000, pid=tree, powercap_root=tmp_path)  # no tick
    mon.start()
    time.sleep(0.2)
    spend(1.0)
    mon.stop()
    summary = mon.summary(items=100)
    assert summary["host"]["energy_j"] == pytest.approx(1.0)  # the phase's own
    assert summary["host"]["pss_samples"] == 1  # the end's
    assert summary["duration_s"] < 1.0


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


def test_a_process_unreadable_in_one_phase_leaves_the_next_phases_pss(tree, monkeypatch,
                                                                      tmp_path):
    """An unreadable process (gone, non-dumpable) costs its phase the PSS figures, not every
    later phase of the monitor."""
    mon = monitor.ResourceMonitor(10, pid=tree)
    monkeypatch.setattr(monitor, "SMAPS_ROLLUP", str(tmp_path / "absent" / "{pid}"))
    with mon:
        time.sleep(0.05)
    assert mon.summary()["peak_host_pss_bytes"] is None
    monkeypatch.setattr(monitor, "SMAPS_ROLLUP", "/proc/{pid}/smaps_rollup")
    with mon:
        time.sleep(0.05)
    summary = mon.summary()
    assert summary["peak_host_pss_bytes"] >= 0.9 * ALLOCATED
    assert not [n for n in summary["notes"] if "PSS unreadable" in n]
