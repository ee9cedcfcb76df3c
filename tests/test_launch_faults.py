"""What the launcher does when its runner misbehaves or its world breaks: killed launchers,
orphans writing late, hung runners, signals, the OOM killer, a full disk.

Runners here are stand-in interpreters (small scripts given as the framework's python), so
each test is fast and the fault is certain; the launcher itself is the real one, run as a
process where it matters (``python -m dlbench.launch``)."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_result import parse_like_dlbs

from dlbench import launch, oom_kills, progress, study, subproc
from dlbench import result as R

SRC = str(Path(__file__).resolve().parents[1] / "src")


def one_cell():
    (cell,) = study.expand_config({"studies": {"s": {"grid": {"model": "deep_mnist",
                                                                "device": "cpu"}}}})
    return json.loads(cell.to_json())


def fake_python(tmp_path: Path, body: str, name: str = "python") -> str:
    """An interpreter that ignores the runner's arguments but ``--output=`` (as ``OUT``) and
    runs ``body``."""
    script = tmp_path / f"{name}.py"
    script.write_text(
        "import os, signal, subprocess, sys, time\n"
        "OUT = next(a.split('=', 1)[1] for a in sys.argv if a.startswith('--output='))\n"
        + body)
    fake = tmp_path / name
    fake.write_text(f"#!/bin/sh\nexec {sys.executable} {script} \"$@\"\n")
    fake.chmod(0o755)
    return str(fake)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def wait_for(predicate, timeout: float = 20.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def start_launcher(cell, out: Path, python: str, *extra: str, env=None,
                   stderr=subprocess.PIPE, **popen) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "dlbench.launch", "--cell", json.dumps(cell), "--output",
         str(out), "--python", python, *extra],
        env={**os.environ, "PYTHONPATH": SRC, **(env or {})}, stderr=stderr,
        text=True, **popen)


SLEEPER = """
child = subprocess.Popen(['sleep', '120'])
open(os.environ['PIDS'], 'w').write(f'{os.getpid()} {child.pid}')
time.sleep(120)
"""


def test_runner_and_its_children_die_when_the_launcher_is_killed(tmp_path):
    """kill -9 of the launcher: the kernel kills its runner (PR_SET_PDEATHSIG), so no
    orphan measures beside the next cell; the cell has no result, so it reruns."""
    pids = tmp_path / "pids"
    out = tmp_path / "cells" / "c.json"
    proc = start_launcher(one_cell(), out, fake_python(tmp_path, SLEEPER),
                          env={"PIDS": str(pids)})
    assert wait_for(pids.exists), proc.stderr.read()
    time.sleep(0.2)
    runner, _ = map(int, pids.read_text().split())
    proc.kill()
    proc.wait()
    assert wait_for(lambda: not alive(runner), 5), "the runner outlived its launcher"
    assert not out.exists()


def processes_marked(mark: str) -> list[int]:
    """The live processes whose environment holds ``DLBENCH_TEST_MARK=<mark>``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and f"DLBENCH_TEST_MARK={mark}".encode() in \
                    (entry / "environ").read_bytes().split(b"\0") and alive(int(entry.name)):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def ranks_marked(mark: str) -> list[int]:
    return [pid for pid in processes_marked(mark)
            if b"LOCAL_RANK=" in Path(f"/proc/{pid}/environ").read_bytes()]


def joined(pid: int) -> bool:
    """Whether a rank has a socket open: it has joined its process group (and tied itself
    to torchrun just before)."""
    with contextlib.suppress(OSError):
        return any(os.readlink(fd).startswith("socket:")
                   for fd in Path(f"/proc/{pid}/fd").iterdir())
    return False


def test_torchruns_ranks_die_when_the_launcher_is_killed(tmp_path):
    """kill -9 of the launcher of a two-process cell: the kernel kills its runner
    (torchrun), and each rank (in a session of its own, which torchrun could not end) now
    dies with its torchrun. Before, both ranks measured on for as long as the cell's
    iterations lasted, beside the next cell."""
    (cell,) = study.expand_config({"studies": {"s": {"grid": {
        "model": "deep_mnist", "device": "cpu", "num_gpus": 2, "num_batches": 100000,
        "num_warmup_batches": 1}}}})
    mark = os.urandom(6).hex()
    proc = start_launcher(json.loads(cell.to_json()), tmp_path / "c.json", sys.executable,
                          env={"DLBENCH_TEST_MARK": mark}, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: len(ranks_marked(mark)) == 2, 60), "no two ranks started"
        ranks = ranks_marked(mark)
        proc.kill()
        proc.wait()
        assert wait_for(lambda: not any(map(alive, ranks)), 10), "a rank outlived torchrun"
    finally:
        for pid in processes_marked(mark):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_a_rank_dies_with_its_torchrun_killed_by_the_kernel(tmp_path):
    """A hand run (no launcher to adopt orphans) whose torchrun the kernel kills (SIGKILL,
    out of memory): torchrun cannot end its ranks, which each die with it (their parent
    death signal) instead of measuring on."""
    mark = os.urandom(6).hex()
    runner = subprocess.Popen(
        [sys.executable, "-m", "dlbench.pytorch", "--model=deep_mnist", "--device=cpu",
         "--num_gpus=2", "--batch_size=8", "--num_batches=100000",
         f"--output={tmp_path / 'r.json'}"],
        env={**os.environ, "PYTHONPATH": SRC, "DLBENCH_TEST_MARK": mark},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: len(ranks_marked(mark)) == 2, 60), "no two ranks started"
        ranks = ranks_marked(mark)
        assert wait_for(lambda: all(map(joined, ranks)), 60), "the ranks never joined"
        (torchrun,) = {int(Path(f"/proc/{pid}/stat").read_text().split(") ")[1].split()[1])
                       for pid in ranks}
        os.kill(torchrun, signal.SIGKILL)
        assert wait_for(lambda: not any(map(alive, ranks)), 10), "a rank outlived torchrun"
    finally:
        for pid in processes_marked(mark):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        runner.wait()


def test_launcher_and_runner_die_when_the_process_running_the_job_is_killed(tmp_path):
    """kill -9 of Snakemake itself: the job's shell execs the launcher, so the launcher's
    parent is the Snakemake process; the kernel ends the launcher (SIGTERM), which ends its
    runner's group. Here a plain Python process stands in for Snakemake."""
    pids = tmp_path / "pids"
    out = tmp_path / "c.json"
    cell = one_cell()
    python = fake_python(tmp_path, SLEEPER)
    job = (f"import subprocess, sys; subprocess.Popen([sys.executable, '-m', "
           f"'dlbench.launch', '--cell', {json.dumps(json.dumps(cell))}, '--output', "
           f"{str(out)!r}, '--python', {python!r}]).wait()")
    parent = subprocess.Popen([sys.executable, "-c", job],
                              env={**os.environ, "PYTHONPATH": SRC, "PIDS": str(pids)})
    assert wait_for(pids.exists)
    time.sleep(0.2)
    runner, grandchild = map(int, pids.read_text().split())
    launcher = int(Path(f"/proc/{runner}/stat").read_text().split(") ")[1].split()[1])
    parent.kill()
    parent.wait()
    assert wait_for(lambda: not any(map(alive, (launcher, runner, grandchild))), 5)
    assert not out.exists()


def test_sigterm_to_the_launcher_ends_the_runners_whole_group(tmp_path):
    """Snakemake stops a job with a signal: the runner's children go too."""
    pids = tmp_path / "pids"
    out = tmp_path / "c.json"
    proc = start_launcher(one_cell(), out, fake_python(tmp_path, SLEEPER),
                          env={"PIDS": str(pids)})
    assert wait_for(pids.exists), proc.stderr.read()
    time.sleep(0.2)
    runner, grandchild = map(int, pids.read_text().split())
    proc.terminate()
    proc.wait()
    assert wait_for(lambda: not alive(runner) and not alive(grandchild), 5)
    assert not out.exists()


RANK_OUTLIVES_ITS_RUNNER = """
rank = subprocess.Popen(['sleep', '120'], start_new_session=True)  # as torchrun's ranks
open(os.environ['PIDS'], 'w').write(f'{os.getpid()} {rank.pid}')
os.kill(os.getpid(), signal.SIGKILL)  # the kernel ends the runner (out of memory)
"""


def test_a_process_left_in_a_session_of_its_own_by_a_killed_runner_is_ended(tmp_path):
    """The runner is killed (here by itself, as the OOM killer would) while a process it
    started in a session of its own runs on: neither its group nor its tree reaches that
    process any more. The launcher adopts such orphans and ends them with the cell."""
    pids = tmp_path / "pids"
    out = tmp_path / "c.json"
    proc = start_launcher(one_cell(), out, fake_python(tmp_path, RANK_OUTLIVES_ITS_RUNNER),
                          env={"PIDS": str(pids)})
    try:
        assert proc.wait(60) == 0, proc.stderr.read()
        _, rank = map(int, pids.read_text().split())
        assert wait_for(lambda: not alive(rank), 5), "the rank outlived the cell"
        assert R.read(out)["status"] == "failed"
    finally:
        proc.kill()
        if pids.exists() and alive(rank := int(pids.read_text().split()[1])):
            os.kill(rank, signal.SIGKILL)


def test_a_result_written_late_by_an_escaped_process_is_never_accepted(tmp_path):
    """A runner whose process escapes (its own session) and writes an 'ok' result after the
    launcher has recorded the cell: the late write lands on the launcher's private staging
    name, never on the cell's result, and the next launch removes it."""
    cell = one_cell()
    late_ok = R.finish(R.new_result(kind="model", cell=cell["params"], study=cell["study"],
                                    cell_id=cell["cell_id"]), "ok")
    python = fake_python(tmp_path, f"""
if os.fork() == 0:
    os.setsid()
    time.sleep(1.0)
    open(OUT, 'w').write({json.dumps(json.dumps(late_ok))})
    os._exit(0)
sys.exit(3)
""")
    out = tmp_path / "c.json"
    launch.launch(cell, out, python)
    assert R.read(out)["status"] == "failed"
    time.sleep(1.5)
    assert R.read(out)["status"] == "failed"  # the escaped process wrote elsewhere
    assert list(tmp_path.glob(".c.json.*.running"))
    launch.launch(cell, out, fake_python(tmp_path, "sys.exit(4)", "python2"))
    assert not list(tmp_path.glob(".c.json.*.running"))


def test_a_hung_runner_is_stopped_after_timeout_s_with_its_whole_group(tmp_path):
    pids = tmp_path / "pids"
    out = tmp_path / "c.json"
    os.environ["PIDS"] = str(pids)
    try:
        launch.launch(one_cell(), out, fake_python(tmp_path, SLEEPER), timeout_s=1.5)
    finally:
        del os.environ["PIDS"]
    res = R.read(out)
    assert res["status"] == "failed"
    assert res["error"].startswith("timed out after 1.5 s")
    runner, grandchild = map(int, pids.read_text().split())
    assert wait_for(lambda: not alive(runner) and not alive(grandchild), 5)
    # Its cost is the launcher's time, at least timeout_s: no 0 s cell for the time left.
    assert res["wall_time_s"] >= 1.5 and res["started_at"] < res["finished_at"]
    wall, status = progress.read_wall_time(out)
    assert wall == res["wall_time_s"] and status == "failed"


def test_ctrl_c_leaves_one_line_in_the_cells_log_and_no_result(tmp_path):
    """An interrupt stops the runner's group; the log ends in one line, no traceback."""
    pids = tmp_path / "pids"
    out = tmp_path / "c.json"
    cell = one_cell()
    # As a terminal's Ctrl-C finds it: a run started in the background (nohup, &) would
    # hand down SIGINT ignored.
    proc = start_launcher(cell, out, fake_python(tmp_path, SLEEPER), env={"PIDS": str(pids)},
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert wait_for(pids.exists), proc.stderr.read()
    time.sleep(0.2)
    runner, grandchild = map(int, pids.read_text().split())
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == (f"dlbench.launch: cell {cell['cell_id']}: "
                                            "interrupted; runner stopped, no result")
    assert wait_for(lambda: not alive(runner) and not alive(grandchild), 5)
    assert not out.exists()


def test_a_runner_killed_by_a_signal_is_named_by_it(tmp_path):
    """A truncated memory-mapped file ends a runner with SIGBUS: the row says so."""
    out = tmp_path / "c.json"
    launch.launch(one_cell(), out, fake_python(
        tmp_path, "print('reading data.mdb', file=sys.stderr)\n"
                  "os.kill(os.getpid(), signal.SIGBUS)\n"))
    res = R.read(out)
    assert res["status"] == "failed"
    assert "killed by SIGBUS (Bus error)" in res["error"]
    assert "reading data.mdb" in res["error"]


def test_a_result_for_another_cell_is_not_accepted(tmp_path):
    cell = one_cell()
    other = R.finish(R.new_result(kind="model", cell=cell["params"], study=cell["study"],
                                  cell_id="pytorch_someone_else"), "ok")
    out = tmp_path / "c.json"
    launch.launch(cell, out, fake_python(
        tmp_path, f"open(OUT, 'w').write({json.dumps(json.dumps(other))})\n"))
    res = R.read(out)
    assert res["status"] == "failed" and res["cell_id"] == cell["cell_id"]
    assert "pytorch_someone_else" in res["error"]


def test_exit_words_name_signals_and_codes():
    assert subproc.exit_words(3) == "exited with code 3"
    assert subproc.exit_words(-signal.SIGKILL).startswith("killed by SIGKILL")
    assert subproc.exit_words(-200) == "killed by signal 200"


def test_oom_kill_count_is_read_from_cgroup_v1_and_v2_files(tmp_path):
    v2 = tmp_path / "v2"
    (v2 / "job" / "step").mkdir(parents=True)
    (v2 / "job" / "memory.events").write_text("low 0\nhigh 0\nmax 4\noom 2\noom_kill 2\n")
    # The innermost cgroup has no memory files here (not delegated): its parent counts.
    proc = tmp_path / "proc"
    proc.mkdir()
    assert oom_kills._count(v2 / "job") == 2
    dirs = oom_kills._cgroup_dirs("0::/job/step\n", v2)
    assert dirs == [v2 / "job" / "step", v2 / "job", v2]
    v1 = tmp_path / "v1"
    (v1 / "memory" / "a").mkdir(parents=True)
    (v1 / "memory" / "a" / "memory.oom_control").write_text(
        "oom_kill_disable 0\nunder_oom 0\noom_kill 7\n")
    dirs = oom_kills._cgroup_dirs("4:memory:/a\n3:cpu:/\n", v1)
    assert dirs[0] == v1 / "memory" / "a" and oom_kills._count(dirs[0]) == 7
    assert oom_kills.rose(1, 2) and not oom_kills.rose(None, 2) and not oom_kills.rose(2, 2)


@contextlib.contextmanager
def memory_cgroup(limit_bytes: int):
    """A child memory cgroup with a limit (needs root and a writable memory controller)."""
    text = Path("/proc/self/cgroup").read_text()
    base = None
    for line in text.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if "memory" in controllers.split(","):
            base = Path("/sys/fs/cgroup/memory") / path.lstrip("/")
        elif hierarchy == "0" and controllers == "" and base is None:
            base = Path("/sys/fs/cgroup") / path.lstrip("/")
    folder = base / f"dlbench-test-{os.getpid()}" if base else None
    try:
        folder.mkdir()
    except (OSError, AttributeError) as exc:
        pytest.skip(f"cannot make a memory cgroup here ({exc}): the OOM-killer path is "
                    "not exercised on this machine")
    try:
        for name in ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "memory.max",
                     "memory.swap.max"):
            if (folder / name).exists():
                (folder / name).write_text(str(limit_bytes if "swap" not in name else 0))
        yield folder
    finally:
        for _ in range(50):
            try:
                folder.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def test_a_runner_killed_by_the_oom_killer_is_an_oom_row(tmp_path):
    """A real OOM kill: the launcher and its runner in a memory cgroup of 300 MB, the
    runner touching 2 GB."""
    out = tmp_path / "c.json"
    python = fake_python(tmp_path, "b = bytearray(2 * 1024**3)\nb[::4096] = b'x' * len(b[::4096])\n")
    with memory_cgroup(300 * 1024**2) as folder:
        procs = folder / "cgroup.procs"

        def join() -> None:
            procs.write_text(str(os.getpid()))

        proc = start_launcher(one_cell(), out, python, preexec_fn=join)
        _, stderr = proc.communicate(timeout=120)
    res = R.read(out)
    assert res["status"] == "oom", stderr
    assert "out-of-memory killer" in res["error"]


def test_a_full_disk_is_named_in_one_line(tmp_path):
    """A 1 MB tmpfs filled up: the launcher cannot write the cell's result and says 'No
    space left on device' (the job fails; Snakemake shows the line)."""
    mount = tmp_path / "full"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs",
                                            str(mount)], capture_output=True).returncode:
        pytest.skip("cannot mount a small tmpfs here (needs root): a real ENOSPC is not "
                    "exercised on this machine")
    try:
        with contextlib.suppress(OSError):
            (mount / "filler").write_bytes(b"\0" * (2 * 1024**2))
        proc = start_launcher(one_cell(), mount / "c.json",
                              fake_python(tmp_path, "sys.exit(1)"))
        _, stderr = proc.communicate(timeout=120)
    finally:
        subprocess.run(["umount", str(mount)], check=False)
    assert proc.returncode == 1
    assert "No space left on device (ENOSPC)" in stderr.strip().splitlines()[-1]


def test_side_files_are_named_after_the_cell_not_its_staging_name(tmp_path):
    """The monitor's series of a runner writing to its staging name lands beside the
    cell's result under the result's own stem."""
    from dlbench import monitor, staging

    staged = staging.staging_path(tmp_path / "cell.json", pid=42)
    assert staged.name == ".cell.json.42.running"
    assert staging.final_path(staged) == tmp_path / "cell.json"
    assert monitor.series_path(staged).name.startswith("cell.monitor.")


# The OOM killer ending another process of the cell than the runner: a DataLoader worker, a
# torchrun rank. Real torch produces the failure and its messages; the memory cgroup's
# OOM-kill count is a stand-in (a file the stand-in runner raises where the kernel would),
# so the kernel's own OOM kill is not exercised here (test_a_runner_killed_by_the_oom_killer
# does, where a memory cgroup can be made).

def oom_count_file(tmp_path: Path, monkeypatch, start: int | None = 5) -> Path:
    """A stand-in for the memory cgroup's oom_kill count: the number in a file (None while
    the file is missing), raised by ``BUMP_OOM_COUNT`` in a stand-in runner."""
    counter = tmp_path / "oom_kill"
    if start is not None:
        counter.write_text(str(start))

    def count(*_args, **_kwargs) -> int | None:
        return int(counter.read_text()) if counter.exists() else None

    monkeypatch.setattr(oom_kills, "count", count)
    monkeypatch.setenv("OOM_COUNT", str(counter))
    return counter


BUMP_OOM_COUNT = """
def bump_oom_count():
    path = os.environ['OOM_COUNT']
    if os.path.exists(path):
        count = int(open(path).read())
        open(path, 'w').write(str(count + 1))
"""

FAILED_RESULT = """
import json
from dlbench import cellrun
from dlbench import result as R
CELL = json.loads(os.environ['CELL'])
res = R.new_result(kind='model', cell=CELL['params'], study=CELL['study'],
                   cell_id=CELL['cell_id'])
"""

DATALOADER_WORKER_KILLED = BUMP_OOM_COUNT + FAILED_RESULT + """
import logging
from torch.utils.data import DataLoader, Dataset
logging.basicConfig()

class Data(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        # The OOM killer picks the worker before its first batch: the runner is then
        # waiting for it, as a training loop mostly is (a worker killed while a batch's
        # tensors are being handed over fails the runner in ways that vary from run to run).
        bump_oom_count()
        os.kill(os.getpid(), signal.SIGKILL)

def load():
    for _ in DataLoader(Data(), batch_size=1, num_workers=1):
        pass
    res['status'] = 'ok'

if os.environ['WRITES_RESULT'] == '1':
    with cellrun.recorded(res, OUT):
        load()
    sys.exit(cellrun.exit_code(res))
load()
"""


@pytest.mark.parametrize("writes_result", [True, False], ids=["failed_result", "no_result"])
def test_a_dataloader_worker_killed_by_the_oom_killer_makes_an_oom_row(
        tmp_path, monkeypatch, capsys, writes_result):
    """The runner sees its DataLoader worker die: through dlbench.cellrun it writes a
    `failed` row "DataLoader worker (pid(s) N) exited unexpectedly", the worker's SIGKILL
    only in the traceback's cause on stderr; without cellrun it leaves no result. Either
    way, the count having risen, the row is `oom` and keeps the runner's own line."""
    oom_count_file(tmp_path, monkeypatch)
    cell = one_cell()
    monkeypatch.setenv("CELL", json.dumps(cell))
    monkeypatch.setenv("WRITES_RESULT", "1" if writes_result else "0")
    out = tmp_path / "c.json"
    launch.launch(cell, out, fake_python(tmp_path, DATALOADER_WORKER_KILLED))
    res = R.read(out)
    assert res["status"] == "oom", res["error"]
    expected_start = "RuntimeError" if writes_result else "python -m dlbench.pytorch: RuntimeError"
    assert res["error"].startswith(expected_start)
    assert "exited unexpectedly" in res["error"]
    assert "is killed by signal: Killed." in res["error"]
    assert "oom_kill count rose" in res["error"]
    # the job log's last DLBS status line is the row's, whatever the runner printed
    logged = parse_like_dlbs(capsys.readouterr().out)
    assert (logged["results.status"], logged["results.status_msg"]) == ("oom", res["error"])


RANK_KILLED = "import os, signal, time\n" + BUMP_OOM_COUNT + """
if os.environ['RANK'] == '1':  # the OOM killer picks rank 1
    bump_oom_count()
    os.kill(os.getpid(), signal.SIGKILL)
time.sleep(60)
"""

TORCHRUN_RANK_KILLED = FAILED_RESULT + """
from dlbench.pytorch import distributed
rc, lines = distributed.run_workers([sys.executable, '-m', 'torch.distributed.run',
                                     '--nproc_per_node=2', os.environ['RANK_SCRIPT']], 2, None)
R.write(R.finish(res, *distributed.workers_outcome(rc, lines)), OUT)
sys.exit(rc or 1)
"""


def test_a_torchrun_rank_killed_by_the_oom_killer_makes_an_oom_row(tmp_path, monkeypatch):
    """A data-parallel cell's runner runs torchrun (two CPU ranks); rank 1 dies by
    SIGKILL and the runner writes a `failed` row from torchrun's report (as
    dlbench.pytorch does). The count having risen, the row is `oom`, the SIGKILL found in
    torchrun's "Root Cause" (not the SIGTERM torchrun itself sent rank 0)."""
    oom_count_file(tmp_path, monkeypatch)
    cell = one_cell()
    rank_script = tmp_path / "rank.py"
    rank_script.write_text(RANK_KILLED)
    monkeypatch.setenv("CELL", json.dumps(cell))
    monkeypatch.setenv("RANK_SCRIPT", str(rank_script))
    out = tmp_path / "c.json"
    launch.launch(cell, out, fake_python(tmp_path, TORCHRUN_RANK_KILLED))
    res = R.read(out)
    assert res["status"] == "oom", res["error"]
    assert res["error"].startswith("rank ")  # the runner's own line first
    assert "Signal 9 (SIGKILL) received by PID" in res["error"]
    assert "oom_kill count rose" in res["error"]


# What the runner's stderr shows in these cheaper stand-ins: DataLoader's own lines, as
# torch prints them (test_a_dataloader_worker_killed_... above makes them for real).
WORKER_KILLED_LINES = """
print('RuntimeError: DataLoader worker (pid 4242) is killed by signal: Killed. ', file=sys.stderr)
print('The above exception was the direct cause of the following exception:', file=sys.stderr)
print('RuntimeError: DataLoader worker (pid(s) 4242) exited unexpectedly', file=sys.stderr)
"""


def run_failing(tmp_path, monkeypatch, body: str, start: int | None = 5, **launch_kwargs):
    oom_count_file(tmp_path, monkeypatch, start)
    cell = one_cell()
    monkeypatch.setenv("CELL", json.dumps(cell))
    out = tmp_path / "c.json"
    launch.launch(cell, out, fake_python(tmp_path, BUMP_OOM_COUNT + FAILED_RESULT + body),
                  **launch_kwargs)
    return R.read(out)


def write_failed(error: str) -> str:
    return f"R.write(R.finish(res, 'failed', {error!r}), OUT)\nsys.exit(1)\n"


def test_a_killed_worker_without_a_rise_of_the_count_stays_failed(tmp_path, monkeypatch):
    """A worker killed by someone else than the OOM killer (a user's kill -9)."""
    res = run_failing(tmp_path, monkeypatch, WORKER_KILLED_LINES + write_failed(
        "RuntimeError: DataLoader worker (pid(s) 4242) exited unexpectedly"))
    assert res["status"] == "failed"
    assert res["error"] == "RuntimeError: DataLoader worker (pid(s) 4242) exited unexpectedly"


def test_a_rise_of_the_count_does_not_relabel_an_unrelated_failure(tmp_path, monkeypatch):
    """Another job's OOM kill in a shared cgroup raises the count while this cell fails for
    its own reason, its processes not killed: it stays `failed`."""
    res = run_failing(tmp_path, monkeypatch, "bump_oom_count()\n" + write_failed(
        "ValueError: --batch_size must be positive"))
    assert res["status"] == "failed"
    assert res["error"] == "ValueError: --batch_size must be positive"


def test_a_killed_worker_where_no_count_can_be_read_stays_failed(tmp_path, monkeypatch):
    res = run_failing(tmp_path, monkeypatch, WORKER_KILLED_LINES + write_failed(
        "RuntimeError: DataLoader worker (pid(s) 4242) exited unexpectedly"), start=None)
    assert res["status"] == "failed"


def test_a_worker_killed_by_another_signal_stays_failed(tmp_path, monkeypatch):
    """SIGBUS (a DataLoader worker out of shared memory) is not the OOM killer's signal."""
    res = run_failing(tmp_path, monkeypatch, """
bump_oom_count()
print('RuntimeError: DataLoader worker (pid 4242) is killed by signal: Bus error. ',
      file=sys.stderr)
""" + write_failed("RuntimeError: DataLoader worker (pid(s) 4242) exited unexpectedly"))
    assert res["status"] == "failed"


def test_a_runner_killed_by_sigkill_as_the_count_rose_is_oom_with_its_last_error_line(
        tmp_path, monkeypatch):
    """The runner itself the OOM killer's choice: no result, its last line kept."""
    res = run_failing(tmp_path, monkeypatch, """
print('allocating the activations', file=sys.stderr, flush=True)
bump_oom_count()
os.kill(os.getpid(), signal.SIGKILL)
""")
    assert res["status"] == "oom"
    assert res["error"].startswith("python -m dlbench.pytorch: killed by SIGKILL")
    assert "last error line: allocating the activations" in res["error"]
    assert "out-of-memory killer" in res["error"]


def test_a_timed_out_runner_stays_failed_though_the_count_rose(tmp_path, monkeypatch):
    """The launcher's own SIGKILL of a hung runner is no OOM kill."""
    res = run_failing(tmp_path, monkeypatch, "bump_oom_count()\ntime.sleep(60)\n",
                      timeout_s=1.0)
    assert res["status"] == "failed"
    assert res["error"].startswith("timed out after 1 s")


WRITTEN_THEN_HUNG = FAILED_RESULT + """
with cellrun.recorded(res, OUT):
    if os.environ['WRITTEN'] == 'oom':
        raise MemoryError('CUDA out of memory')
    res['status'] = 'ok'
time.sleep(60)  # a teardown that never ends
"""


@pytest.mark.parametrize(("written", "recorded"), [
    ("ok", "failed"), ("oom", "oom")])
def test_a_runner_that_wrote_its_result_and_then_hung_is_said_so(tmp_path, monkeypatch,
                                                                   capsys, written, recorded):
    """Its measurement done and written, the runner would not exit: the row is failed (past
    timeout_s), and says the runner had written an ok result, so that the ok figures
    earlier in the job's log are not taken for the row's; an oom result stays an oom row,
    its error kept."""
    cell = one_cell()
    monkeypatch.setenv("CELL", json.dumps(cell))
    monkeypatch.setenv("WRITTEN", written)
    out = tmp_path / "c.json"
    launch.launch(cell, out, fake_python(tmp_path, WRITTEN_THEN_HUNG), timeout_s=3.0)
    res = R.read(out)
    assert res["status"] == recorded
    detail = ": MemoryError: CUDA out of memory" if written == "oom" else ""
    assert res["error"].startswith(f"timed out after 3 s (timeout_s, or its cluster job's "
                                   f"runtime less a margin where shorter): it had written its "
                                   f"result ({written}{detail}) but did not exit")
    logged = parse_like_dlbs(capsys.readouterr().out)
    assert (logged["results.status"], logged["results.status_msg"]) == (recorded,
                                                                       res["error"])
