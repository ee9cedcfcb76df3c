"""GPU ids for concurrent cells: file locks (dlbench.gpus) and the launcher that uses them.

No GPU is needed: the allocator hands out the ids it is given (CUDA_VISIBLE_DEVICES), and
the runner is replaced by a small interpreter that reports the CUDA_VISIBLE_DEVICES it got.
Not exercised here: a CUDA runtime honouring those ids on real devices.
"""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dlbench import gpus, launch, study
from dlbench import result as R

REPO = Path(__file__).resolve().parents[1]


def gpu_cell(num_gpus=1):
    (cell,) = study.expand_config({"studies": {"s": {"grid": {
        "model": "deep_mnist", "device": "gpu", "num_gpus": num_gpus}}}})
    return json.loads(cell.to_json())


@pytest.mark.parametrize("listed, ids", [
    ("0,2", ["0", "2"]),
    (" 3 , 1 ", ["3", "1"]),
    ("", []),
    ("1,-1,2", ["1"]),  # CUDA stops at the first invalid entry
    ("GPU-8f6e,GPU-12ab", ["GPU-8f6e", "GPU-12ab"]),
])
def test_visible_gpus_follow_cuda_visible_devices(listed, ids):
    assert gpus.visible_gpus({"CUDA_VISIBLE_DEVICES": listed}) == ids


def test_visible_gpus_count_nvidia_smi_lines_when_nvml_is_absent(tmp_path, monkeypatch):
    """An `nvidia-smi` test double lists two GPUs, one with MIG devices: two ids."""
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\ncat <<'EOF'\n"
                    "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n"
                    "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-2)\n"
                    "  MIG 3g.40gb     Device  0: (UUID: MIG-3)\n"
                    "EOF\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(gpus, "_nvml_count", lambda: None)
    assert gpus.visible_gpus({}) == ["0", "1"]


def test_asking_for_more_gpus_than_visible_fails_in_one_line(tmp_path):
    with pytest.raises(gpus.GpuAllocationError) as err:
        gpus.acquire(3, ["0", "1"], tmp_path)
    assert "needs 3 GPU(s)" in str(err.value) and "0,1" in str(err.value)
    assert "\n" not in str(err.value)


def test_a_held_gpu_is_not_given_twice_and_partial_grabs_are_let_go(tmp_path):
    first = gpus.acquire(1, ["0", "1"], tmp_path)
    assert first.ids == ["0"]
    # Two are needed, only "1" is free: the try fails and must not keep "1".
    with pytest.raises(gpus.GpuAllocationError, match="no 2 free GPU"):
        gpus.acquire(2, ["0", "1"], tmp_path, poll_s=0.05, timeout_s=0.2)
    second = gpus.acquire(1, ["0", "1"], tmp_path, timeout_s=0)
    assert second.ids == ["1"]
    first.release()
    second.release()
    both = gpus.acquire(2, ["0", "1"], tmp_path, timeout_s=0)
    assert both.ids == ["0", "1"] and both.cuda_visible_devices == "0,1"
    both.release()


# The lock directory is shared by every user of the host (/tmp/dlbench-gpus, mode 1777):
# another user may have put something there under a lock file's name.
@pytest.mark.parametrize("planted", ["symlink", "hard link", "fifo"])
def test_a_lock_file_that_is_not_a_plain_file_of_its_own_is_refused(tmp_path, planted):
    locks, victim = tmp_path / "locks", tmp_path / "bashrc"
    locks.mkdir()
    victim.write_text("export PATH=$HOME/bin:$PATH\n")
    lock = gpus._lock_path(locks, "0")
    if planted == "symlink":
        lock.symlink_to(victim)
    elif planted == "hard link":
        os.link(victim, lock)
    else:
        os.mkfifo(lock)
    with pytest.raises(gpus.GpuAllocationError) as err:
        gpus.acquire(2, ["1", "0"], locks, timeout_s=0)
    assert str(err.value).startswith(f"GPU lock file {lock}: ") and "\n" not in str(err.value)
    assert victim.read_text() == "export PATH=$HOME/bin:$PATH\n"  # not truncated
    gpus.acquire(1, ["1"], locks, timeout_s=0).release()  # GPU 1 was let go


def test_a_lock_directory_others_could_plant_files_in_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(gpus.GpuAllocationError, match=r"^GPU lock directory .*link: "):
        gpus.acquire(1, ["0"], tmp_path / "link", timeout_s=0)
    real.chmod(0o777)  # anyone may replace anyone's lock file
    with pytest.raises(gpus.GpuAllocationError, match=r"^GPU lock directory .*real: "):
        gpus.acquire(1, ["0"], real, timeout_s=0)
    real.chmod(0o1777)  # sticky, as /tmp: the design's shared directory
    gpus.acquire(1, ["0"], real, timeout_s=0).release()
    made = tmp_path / "made"
    gpus.acquire(1, ["0"], made, timeout_s=0).release()
    assert made.stat().st_mode & 0o7777 == 0o1777


HOLDER = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    from dlbench import gpus
    lock_dir, out, count, rounds = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), 3
    with out.open("w") as log:
        for _ in range(rounds):
            with gpus.allocated(count, ["0", "1", "2"], lock_dir, poll_s=0.01) as a:
                start = time.monotonic()
                time.sleep(0.15)
                log.write(json.dumps({"ids": a.ids, "start": start,
                                      "end": time.monotonic()}) + "\\n")
""")


def test_racing_processes_never_hold_the_same_gpu_at_once(tmp_path):
    """Six processes (needing one or two GPUs each) take turns on three GPUs, three times
    each; their holding intervals on any one id must never overlap."""
    locks = tmp_path / "locks"
    procs = [subprocess.Popen([sys.executable, "-c", HOLDER, str(locks), str(tmp_path / f"{i}.jsonl"),
                               str(1 + i % 2)]) for i in range(6)]
    for proc in procs:
        assert proc.wait(timeout=60) == 0
    holds = [json.loads(line) for i in range(6)
             for line in (tmp_path / f"{i}.jsonl").read_text().splitlines()]
    assert len(holds) == 18
    by_gpu = {}
    for h in holds:
        for gpu in h["ids"]:
            by_gpu.setdefault(gpu, []).append((h["start"], h["end"]))
    for gpu, spans in by_gpu.items():
        spans.sort()
        for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
            assert start >= end, f"GPU {gpu} had two holders at once"
    # The processes did run side by side (on different GPUs), or the test would prove nothing.
    spans = sorted((h["start"], h["end"]) for h in holds)
    assert any(b[0] < a[1] for a, b in zip(spans, spans[1:], strict=False))


def test_a_killed_holder_leaves_its_gpu_free(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; from dlbench import gpus;"
         "gpus.acquire(1, ['0'], Path(sys.argv[1])); print('held', flush=True); time.sleep(60)",
         str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(gpus.GpuAllocationError):
            gpus.acquire(1, ["0"], tmp_path, timeout_s=0)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
    gpus.acquire(1, ["0"], tmp_path, timeout_s=5).release()


def reporting_interpreter(tmp_path):
    """Stands in for a framework interpreter: records CUDA_VISIBLE_DEVICES, writes no result."""
    seen = tmp_path / "seen.txt"
    fake = tmp_path / "python"
    fake.write_text(f'#!/bin/sh\nprintf "%s" "${{CUDA_VISIBLE_DEVICES-unset}}" > {seen}\nexit 3\n')
    fake.chmod(0o755)
    return fake, seen


def test_launcher_gives_a_gpu_cell_free_gpus_and_releases_them(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6,7")
    monkeypatch.delenv(gpus.ALLOCATION_ENV, raising=False)
    fake, seen = reporting_interpreter(tmp_path)
    locks = tmp_path / "locks"
    taken = gpus.acquire(1, ["4"], locks)  # another cell holds GPU 4
    try:
        launch.launch(gpu_cell(num_gpus=2), tmp_path / "r.json", str(fake), gpu_lock_dir=locks)
    finally:
        taken.release()
    assert seen.read_text() == "6,7"
    assert R.read(tmp_path / "r.json")["status"] == "failed"  # the fake wrote no result
    gpus.acquire(3, ["4", "6", "7"], locks, timeout_s=0).release()  # all free again


def test_launcher_leaves_cpu_cells_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    fake, seen = reporting_interpreter(tmp_path)
    (cell,) = study.expand_config({"studies": {"s": {"grid": {"model": "deep_mnist",
                                                              "device": "cpu"}}}})
    launch.launch(json.loads(cell.to_json()), tmp_path / "r.json", str(fake),
                  gpu_lock_dir=tmp_path / "locks")
    assert seen.read_text() == ""  # untouched, and no lock taken
    assert not (tmp_path / "locks").exists()


def test_gpu_cell_on_a_host_without_gpus_is_a_failed_row(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.delenv(gpus.ALLOCATION_ENV, raising=False)
    fake, seen = reporting_interpreter(tmp_path)
    rc = launch.launch(gpu_cell(), tmp_path / "r.json", str(fake), gpu_lock_dir=tmp_path)
    res = R.read(tmp_path / "r.json")
    assert rc != 0 and res["status"] == "failed" and not seen.exists()
    assert "needs 1 GPU(s) but this host shows 0" in res["error"]


def test_launcher_keeps_the_gpus_a_cluster_scheduler_gave_the_job(tmp_path):
    """Under Slurm the job's CUDA_VISIBLE_DEVICES is its own: no locks, no waiting, even
    though another process holds a lock on the same id on this host."""
    fake, seen = reporting_interpreter(tmp_path)
    locks = tmp_path / "locks"
    taken = gpus.acquire(1, ["0"], locks)
    try:
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0", gpus.ALLOCATION_ENV: "scheduler",
               gpus.LOCK_DIR_ENV: str(locks)}
        proc = subprocess.run(
            [sys.executable, "-m", "dlbench.launch", "--cell", json.dumps(gpu_cell()),
             "--output", str(tmp_path / "r.json"), "--python", str(fake)],
            env=env, capture_output=True, text=True, timeout=60)
    finally:
        taken.release()
    assert proc.returncode == 0, proc.stderr
    assert seen.read_text() == "0"
    assert "GPUs from the scheduler: CUDA_VISIBLE_DEVICES=0" in proc.stderr


def test_workflow_declares_the_visible_gpus_as_its_gpu_total(tmp_path):
    """Snakemake caps each GPU cell's `gpu` resource at the declared total: with two
    visible GPUs, the 1-, 2- and 4-GPU cells ask for 1, 2 and 2."""
    (tmp_path / "config.yaml").write_text(json.dumps({"studies": {"g": {"grid": {
        "model": "deep_mnist", "device": "gpu", "num_gpus": [1, 2, 4]}}}}))
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"),
         "--directory", str(tmp_path), "--configfile", str(tmp_path / "config.yaml"), "-n"],
        env={**os.environ, "CUDA_VISIBLE_DEVICES": "3,5"}, capture_output=True, text=True,
        timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    asked = re.findall(r"resources: .*\bgpu=(\d+)", proc.stdout + proc.stderr)
    assert sorted(map(int, asked)) == [1, 2, 2]
