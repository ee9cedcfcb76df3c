"""Multi-node cells without a cluster: the num_nodes axis, what the workflow asks a
scheduler for, the refusal of a local run, reading a Slurm allocation, the node agent,
srun's and torchrun's failure reports, and the merge of MXNet workers' results.
Against a real two-node Slurm: tests/test_slurm_two_nodes.py."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pytorch_cell import run_runner

from dlbench import multinode, study, systems, torchrun_report, workflow_support
from dlbench import result as R
from dlbench.mxnet import dist
from dlbench.pytorch import distributed

REPO = Path(__file__).resolve().parents[1]


def cells(grid, name="s"):
    return study.expand_config({"studies": {name: {"grid": grid}}})


# The axis, validation and the cluster job's resources -----------------------------------


def test_num_nodes_multiplies_the_gpus_of_the_job_and_asks_for_one_task_per_node():
    one, two = cells({"model": "resnet50", "num_gpus": 4, "num_nodes": [1, 2]})
    assert workflow_support.gpus_of(one) == 4 and workflow_support.cluster_resources(one) == {}
    assert workflow_support.gpus_of(two) == 8
    # What a submit command asking per node (cluster-generic's --gpus-per-node) gets.
    assert workflow_support.gpus_per_node(one) == workflow_support.gpus_per_node(two) == 4
    assert workflow_support.cluster_resources(two) == {
        "nodes": 2, "tasks": 2, "mpi": "srun", "tasks_per_gpu": 0, "gres": "gpu:4"}
    (cpu,) = cells({"model": "deep_mnist", "device": "cpu", "num_nodes": 3})
    assert workflow_support.gpus_of(cpu) == workflow_support.gpus_per_node(cpu) == 0
    assert "gres" not in workflow_support.cluster_resources(cpu)


def test_a_run_without_a_scheduler_refuses_a_multi_node_cell_in_one_line():
    workflow_support.check_single_node(cells({"model": "deep_mnist", "num_nodes": 1}))
    with pytest.raises(workflow_support.WorkflowConfigError) as err:
        workflow_support.check_single_node(cells({"model": "deep_mnist", "num_nodes": 2},
                                                 name="scale"))
    assert str(err.value).startswith("study 'scale': num_nodes: 2 nodes need a cluster")
    assert "profiles/slurm" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("grid, field, words", [
    ({"framework": "mxnet", "kv_store": "device"}, "kv_store", "needs a distributed kvstore"),
    ({"data": "imgs", "data_loader_only": True}, "num_nodes", "must be 1"),
    ({"num_nodes": 0}, "num_nodes", "must be >= 1"),
])
def test_multi_node_cells_a_framework_cannot_run_are_config_errors(grid, field, words):
    cfg = {"studies": {"s": {"grid": {"model": "deep_mnist", "num_nodes": 2, **grid}}},
           "datasets": {"imgs": {"synthetic": {"classes": 2, "images_per_class": 2}}}}
    with pytest.raises(study.ConfigError) as err:
        study.expand_config(cfg)
    assert f"study 's': {field}: " in str(err.value) and words in str(err.value)


def test_a_profile_of_a_multi_node_cell_is_refused_in_one_line():
    from dlbench.profiling import config as profiling_config

    scale = cells({"model": "deep_mnist", "num_nodes": [1, 2]}, name="scale")
    select = {"profiling": {"select": [{"match": {"study": "scale"}, "tools": ["torch"]}]}}
    with pytest.raises(profiling_config.ProfilingConfigError) as err:
        profiling_config.select_jobs(select, scale, system="box")
    assert str(err.value) == (f"profiling.select[0]: cell scale/{scale[1].id} spans 2 nodes; "
                              "profiles are of one-node cells (num_nodes: 1)")
    select["profiling"]["select"][0]["match"]["num_nodes"] = 1
    assert [job.cell for job in profiling_config.select_jobs(select, scale, system="box")] == [scale[0]]


@pytest.mark.parametrize("jobs", [
    ["--cores", "1"],
    # A local run may give a job count as well: still no scheduler.
    ["--cores", "2", "--jobs", "2"],
])
def test_a_local_workflow_run_refuses_a_multi_node_study_before_any_job(tmp_path, jobs):
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(
        {"studies": {"scale": {"grid": {"model": "deep_mnist", "device": "cpu",
                                        "num_nodes": [1, 2]}}}}))
    done = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", *jobs, "--snakefile",
         str(REPO / "Snakefile"), "--directory", str(tmp_path), "--configfile",
         str(tmp_path / "config.yaml")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if "dlbench config error" in line]
    assert errors == ["dlbench config error: study 'scale': num_nodes: 2 nodes need a cluster "
                      f"scheduler; {multinode.CLUSTER_HINT}"], done.stderr[-2000:]


def test_a_cluster_job_keeps_the_system_label_of_the_run_that_submitted_it():
    """Jobs run on other hosts: the label comes from the run ($DLBENCH_SYSTEM), not from
    the node's hostname; the config's own label wins over both."""
    assert systems.label_of({}, {"DLBENCH_SYSTEM": "login1"}) == "login1"
    assert systems.label_of({"system": "a100"}, {"DLBENCH_SYSTEM": "login1"}) == "a100"
    assert systems.label_of({}, {}) == systems.default_label()
    with pytest.raises(systems.SystemLabelError, match="DLBENCH_SYSTEM"):
        systems.label_of({}, {"DLBENCH_SYSTEM": "bad label"})


# The Slurm allocation and srun --------------------------------------------------------


JOB = ("JobId=42 JobName=x UserId=root(0) JobState=RUNNING NodeList=gpu[07-08] "
       "BatchHost=gpu07 NumNodes=2 NumCPUs=32 NumTasks=2 CPUs/Task=16 ReqB:S:C:T=0:0:*:*")
NODES = {"gpu07": "NodeName=gpu07 Arch=x86_64 NodeAddr=10.0.0.7 NodeHostName=gpu07",
         "gpu08": "NodeName=gpu08 Arch=x86_64 NodeAddr=10.0.0.8 NodeHostName=gpu08"}


def fake_scontrol(args):
    """What scontrol 22.05 prints for these queries (see the real one in
    tests/test_slurm_two_nodes.py)."""
    if args[:2] == ["show", "job"]:
        return JOB + "\n"
    if args[:2] == ["show", "hostnames"]:
        assert args[2] == "gpu[07-08]"
        return "gpu07\ngpu08\n"
    return NODES[args[3]] + "\n"


def on_path(tool):
    return f"/usr/bin/{tool}"


def test_the_allocation_is_read_from_scontrol_and_srun_runs_one_task_per_node():
    alloc = multinode.slurm_allocation(2, {"SLURM_JOB_ID": "42", "SLURMD_NODENAME": "gpu08"},
                                       fake_scontrol, on_path)
    assert alloc == multinode.Allocation("42", ("gpu07", "gpu08"), "gpu08", "10.0.0.8", 16)
    cmd = alloc.srun(2, ["prog", "--flag"])
    assert cmd[1:8] == ["--jobid=42", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1",
                        "--nodelist=gpu08,gpu07", "--cpus-per-task=16", "--kill-on-bad-exit=1"]
    assert cmd[-2:] == ["prog", "--flag"]


def test_each_node_task_gets_the_cpus_the_job_holds_on_its_node():
    """A GPU job asks --cpus-per-gpu: CPUs/Task says 1, the job holds 16 on each node."""
    gpu_job = JOB.replace("CPUs/Task=16", "CPUs/Task=1")
    alloc = multinode.slurm_allocation(
        2, {"SLURM_JOB_ID": "42", "SLURMD_NODENAME": "gpu07"},
        lambda args: gpu_job if args[:2] == ["show", "job"] else fake_scontrol(args), on_path)
    assert alloc.cpus_per_task == 16


@pytest.mark.parametrize("environ, nodes, words", [
    ({}, 2, "not one (SLURM_JOB_ID is unset)"),
    ({"SLURM_JOB_ID": "42", "SLURMD_NODENAME": "gpu07"}, 3, "holds 2 node(s) (gpu07,gpu08)"),
    ({"SLURM_JOB_ID": "42", "SLURMD_NODENAME": "login"}, 2, "runs on login, which is not"),
])
def test_an_allocation_that_cannot_hold_the_cell_says_why(environ, nodes, words):
    with pytest.raises(multinode.MultiNodeError) as err:
        multinode.slurm_allocation(nodes, environ, fake_scontrol, on_path)
    assert words in str(err.value)


def test_a_job_without_slurms_commands_here_says_which_are_missing():
    """A job on a node without srun: one line, before anything starts."""
    with pytest.raises(multinode.MultiNodeError) as err:
        multinode.slurm_allocation(2, {"SLURM_JOB_ID": "42"}, fake_scontrol,
                                   lambda tool: None if tool == "srun" else on_path(tool))
    assert str(err.value).startswith("num_nodes 2: srun not found on PATH (Slurm job 42)")


@pytest.mark.parametrize("variable", ["APPTAINER_CONTAINER", "SINGULARITY_CONTAINER"])
def test_a_runner_in_a_container_image_starts_no_node_outside_it(variable):
    """srun would start the nodes' tasks on the hosts, outside the image, even where
    Slurm's commands are bound into it: refused in one line, before anything starts."""
    with pytest.raises(multinode.MultiNodeError) as err:
        multinode.slurm_allocation(2, {"SLURM_JOB_ID": "42", variable: "/img/pytorch.sif"},
                                   fake_scontrol, on_path)
    assert str(err.value) == ("num_nodes 2: this runner is in container image "
                              "/img/pytorch.sif, and srun would start the nodes' tasks "
                              "outside it; run the study without --use-apptainer")


def test_srun_reports_name_the_node_and_task_that_ended_first():
    lines = ["0: step 3", "srun: error: gpu08: task 1: Killed",
             "srun: launch/slurm: _step_signal: Terminating StepId=7.0",
             "srun: error: gpu07: task 0: Exited with exit code 1"]
    failed = multinode.node_failures(lines)
    assert [f.host for f in failed] == ["gpu08", "gpu07"]
    assert multinode.failure_message(1, lines, []) == "node gpu08 (task 1): Killed"
    assert multinode.failure_message(1, [], ["oom rank 0"]) == "oom rank 0"
    assert multinode.failure_message(9, [], []) == "srun exited with code 9"
    assert multinode.unlabelled("12: __results.status__=\"ok\"") == '__results.status__="ok"'


def test_torchrun_failure_report_names_the_rank_its_host_and_signal():
    lines = ["Failures:", "  <NO_OTHER_FAILURES>", "Root Cause (first observed failure):",
             "[0]:", "  time      : 2026-11-25_15:28:58", "  host      : node2",
             "  rank      : 1 (local_rank: 0)", "  exitcode  : -9 (pid: 2870)  (SIGKILL)",
             "  error_file: <N/A>"]
    assert torchrun_report.first_failure(lines) == \
        "rank 1 on node2: exit code -9 (pid: 2870) (SIGKILL)"
    assert torchrun_report.first_failure(["host : a", "unrelated", "rank : 1"]) is None


def test_torchrun_failure_names_the_root_cause_not_a_rank_torchrun_stopped():
    """torchrun lists the ranks it stopped itself (SIGTERM) under "Failures:", above the
    rank that failed first: the row names the root cause."""
    lines = ["Failures:", "[1]:", "  time      : 2026-11-25_15:28:58", "  host      : node1",
             "  rank      : 0 (local_rank: 0)", "  exitcode  : -15 (pid: 2869)",
             "  error_file: <N/A>", "  traceback : Signal 15 (SIGTERM) received by PID 2869",
             "------------------------------------------------------------",
             "Root Cause (first observed failure):", "[0]:",
             "  time      : 2026-11-25_15:28:57", "  host      : node1",
             "  rank      : 1 (local_rank: 1)", "  exitcode  : -9 (pid: 2870)",
             "  error_file: <N/A>", "  traceback : Signal 9 (SIGKILL) received by PID 2870"]
    assert torchrun_report.first_failure(lines) == "rank 1 on node1: exit code -9 (pid: 2870)"


def test_a_rendezvous_a_node_never_joins_times_out_and_says_so(tmp_path):
    """torchrun expecting two nodes where one comes: its rendezvous gives up after the join
    timeout (3 s here, 300 s in a cell) and the report says a node did not join."""
    done = subprocess.run(
        distributed.torchrun_command(1, ["--model=deep_mnist"], f"127.0.0.1:{multinode.free_port()}",
                                     nnodes=2, rdzv_conf="is_host=1,join_timeout=3"),
        capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode != 0
    assert torchrun_report.first_failure(done.stderr.splitlines(), 3) == \
        "the nodes' rendezvous timed out after 3 s: a node did not join"


def node_agent(*args, environ):
    return subprocess.run([sys.executable, "-m", "dlbench.multinode", *args],
                          capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", **environ,
                               "PYTHONPATH": str(REPO / "src")})


def test_the_node_agent_fills_in_the_node_and_whether_it_hosts_the_rendezvous():
    show = [sys.executable, "-c", "import os, sys; print(sys.argv[1:], os.environ['DLBENCH_NODE'])"]
    done = node_agent("--host=gpu07", "--gpus=0", "--", *show, "{node_rank}", "{is_host}",
                      "x{node_name}", environ={"SLURMD_NODENAME": "gpu08", "SLURM_NODEID": "1"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['1', '0', 'xgpu08'] gpu08"
    host = node_agent("--host=gpu07", "--", *show, "{is_host}",
                      environ={"SLURMD_NODENAME": "gpu07", "SLURM_NODEID": "0"})
    assert host.stdout.strip() == "['1'] gpu07"


def test_the_node_agent_refuses_a_node_with_fewer_gpus_than_the_cell_needs():
    done = node_agent("--host=gpu07", "--gpus=4", "--", "true",
                      environ={"SLURMD_NODENAME": "gpu08", "CUDA_VISIBLE_DEVICES": "0,1"})
    assert done.returncode == 3
    assert "failed node gpu08: the cell needs 4 GPU(s) on each node, Slurm gave this node 2" \
        in done.stderr


def test_a_multi_node_pytorch_cell_outside_a_slurm_job_is_a_failed_row(tmp_path):
    proc, res = run_runner(tmp_path, "--model=deep_mnist", "--device=cpu", "--num_nodes=2",
                           "--batch_size=2", "--num_batches=2")
    assert proc.returncode == 1 and res is not None
    assert res["status"] == "failed" and res["cell"]["num_nodes"] == 2
    assert res["error"].startswith("num_nodes 2 needs a Slurm job of 2 nodes")


# MXNet: the workers' results become the cell's ------------------------------------------


def worker_doc(times, host, rank, status="ok", split=(None, None)):
    res = R.new_result(kind="model", cell={"framework": "mxnet", "num_nodes": 2}, study="s",
                       cell_id="c")
    res["environment"] = {"hostname": host}
    if status == "ok":
        wait, compute = split
        res["measurements"] = [R.measurement(
            name="deep_mnist", pass_="training", times_s=times, items_per_iteration=4,
            parameters=10, data_wait_s=wait, compute_s=compute,
            extra={"rank": rank, "num_workers": 2})]
        R.finish(res, "ok")
    else:
        R.finish(res, status, "CUDA out of memory")
    return res


def test_merged_workers_give_the_slowest_time_of_each_iteration_and_all_samples(tmp_path):
    args = type("Args", (), {"study": "s", "cell_id": "c"})()
    R.write(worker_doc([1.0, 3.0, 2.0], "gpu07", 0), dist.part_path(tmp_path, 0))
    R.write(worker_doc([2.0, 1.0, 2.5], "gpu08", 1), dist.part_path(tmp_path, 1))
    res = dist.merge({"framework": "mxnet"}, args, tmp_path, 2, 0, [])
    (m,) = res["measurements"]
    assert m["times_s"] == [2.0, 3.0, 2.5] and m["items_per_iteration"] == 8
    assert m["throughput"] == pytest.approx(8 / 2.5)
    assert m["extra"]["hosts"] == ["gpu07", "gpu08"] and m["extra"]["worker_ranks"] == [0, 1]


def test_merged_workers_say_the_monitors_energy_is_node_0s(tmp_path):
    """The row's throughput is both workers'; worker 0's monitor saw its own node: its
    energy note says so (samples per joule are node 0's own, not the row's)."""
    args = type("Args", (), {"study": "s", "cell_id": "c"})()
    first = worker_doc([1.0, 3.0, 2.0], "gpu07", 0)
    first["extra"]["monitor"] = {"enabled": True, "energy_j": 900.0,
                                 "energy_note": "partial: no readable RAPL counters"}
    R.write(first, dist.part_path(tmp_path, 0))
    R.write(worker_doc([2.0, 1.0, 2.5], "gpu08", 1), dist.part_path(tmp_path, 1))
    res = dist.merge({"framework": "mxnet"}, args, tmp_path, 2, 0, [])
    assert res["extra"]["monitor"]["energy_note"] == (
        "node 0 of 2: its worker's samples and its GPUs' and host's energy (not the "
        "parameter server's process); partial: no readable RAPL counters")
    assert res["extra"]["monitor"]["energy_j"] == 900.0


def test_merged_workers_on_real_data_split_the_time_as_the_worker_that_waited_longest(
        tmp_path):
    """Worker 1 starves on input while worker 0 waits for it in the push/pull (its
    compute): the cell's split is worker 1's, every worker's wait beside it."""
    args = type("Args", (), {"study": "s", "cell_id": "c"})()
    R.write(worker_doc([2.0, 2.0], "gpu07", 0, split=(0.1, 3.9)), dist.part_path(tmp_path, 0))
    R.write(worker_doc([2.0, 2.0], "gpu08", 1, split=(3.0, 1.0)), dist.part_path(tmp_path, 1))
    (m,) = dist.merge({"framework": "mxnet"}, args, tmp_path, 2, 0, [])["measurements"]
    assert (m["data_wait_s"], m["compute_s"]) == (3.0, 1.0)
    assert m["extra"]["data_wait_rank"] == 1 and m["extra"]["ranks_data_wait_s"] == [0.1, 3.0]


def test_merged_workers_name_the_starved_worker_by_its_kvstore_rank_not_its_node(tmp_path):
    """The kvstore numbers its workers as they join: node 0's worker may be rank 1. The
    cell names the worker that waited longest by its rank, and lists the waits by rank."""
    args = type("Args", (), {"study": "s", "cell_id": "c"})()
    R.write(worker_doc([2.0, 2.0], "gpu07", 1, split=(3.0, 1.0)), dist.part_path(tmp_path, 0))
    R.write(worker_doc([2.0, 2.0], "gpu08", 0, split=(0.1, 3.9)), dist.part_path(tmp_path, 1))
    (m,) = dist.merge({"framework": "mxnet"}, args, tmp_path, 2, 0, [])["measurements"]
    assert (m["data_wait_s"], m["compute_s"]) == (3.0, 1.0)
    assert m["extra"]["data_wait_rank"] == 1 and m["extra"]["ranks_data_wait_s"] == [0.1, 3.0]
    assert m["extra"]["worker_ranks"] == [1, 0]  # node order, as the hosts


def test_merged_workers_on_synthetic_data_keep_no_input_split(tmp_path):
    args = type("Args", (), {"study": "s", "cell_id": "c"})()
    R.write(worker_doc([2.0], "gpu07", 0, split=(None, 2.0)), dist.part_path(tmp_path, 0))
    R.write(worker_doc([2.0], "gpu08", 1, split=(None, 2.0)), dist.part_path(tmp_path, 1))
    (m,) = dist.merge({"framework": "mxnet"}, args, tmp_path, 2, 0, [])["measurements"]
    assert m["data_wait_s"] is None and m["compute_s"] == 2.0
    assert "data_wait_rank" not in m["extra"]


def test_a_worker_that_failed_or_wrote_nothing_fails_the_cell_naming_it(tmp_path):
    args = type("Args", (), {"study": "s", "cell_id": "c"})()
    R.write(worker_doc([1.0], "gpu07", 0), dist.part_path(tmp_path, 0))
    R.write(worker_doc([], "gpu08", 1, status="oom"), dist.part_path(tmp_path, 1))
    res = dist.merge({"framework": "mxnet"}, args, tmp_path, 2, 1, [])
    assert res["status"] == "oom" and res["error"] == "worker on gpu08: CUDA out of memory"
    dist.part_path(tmp_path, 1).unlink()
    res = dist.merge({"framework": "mxnet"}, args, tmp_path, 2, 1,
                     ["srun: error: gpu08: task 1: Killed"])
    assert res["status"] == "failed" and res["error"] == "node gpu08 (task 1): Killed"


def test_the_workers_argv_writes_to_their_own_file():
    assert dist.with_output(["--model=x", "--output", "r.json", "--dtype=float32"], "p") == \
        ["--model=x", "--dtype=float32", "--output=p"]
    assert dist.with_output(["--output=r.json"], "p") == ["--output=p"]


RANK_THREADS = """\
import json, os, sys
import torch
names = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS")
seen = {"torch": torch.get_num_threads(), **{n: os.environ.get(n) for n in names}}
print("threads " + json.dumps(seen), file=sys.stderr)
"""


def test_each_torchrun_rank_gets_its_share_of_every_thread_count_of_the_job(
        tmp_path, monkeypatch, capfd):
    """Snakemake sets OMP_NUM_THREADS, MKL_NUM_THREADS, OPENBLAS_NUM_THREADS, ... to the
    job's threads; each of torchrun's ranks given them whole would oversubscribe the
    job's CPUs nproc times over, and PyTorch built with MKL takes MKL_NUM_THREADS over
    OMP_NUM_THREADS. run_workers for 2 ranks, on a job of 8 usable CPUs: a rank sees 4
    threads in torch and in every count. The command is the rank itself, not torchrun,
    which passes its environment on to its ranks (adding their ranks; OMP_NUM_THREADS
    only where unset): one torch start instead of three. MKL_DYNAMIC=FALSE lets torch report
    the count given, not one capped at this machine's cores; NUMEXPR_NUM_THREADS, not a
    count, is passed as it is."""
    script = tmp_path / "rank.py"
    script.write_text(RANK_THREADS)
    monkeypatch.setattr("dlbench.cpu.usable_cpus", lambda: 8)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        monkeypatch.setenv(name, "16")  # above the usable CPUs: capped first
    monkeypatch.setenv("NUMEXPR_NUM_THREADS", "auto")
    monkeypatch.setenv("MKL_DYNAMIC", "FALSE")
    rc, lines = distributed.run_workers([sys.executable, str(script)], 2, None)
    capfd.readouterr()  # the rank's output, passed through
    assert rc == 0, lines
    seen = [json.loads(line.split("threads ", 1)[1]) for line in lines if "threads {" in line]
    assert seen == [{"torch": 4, "OMP_NUM_THREADS": "4", "MKL_NUM_THREADS": "4",
                     "OPENBLAS_NUM_THREADS": "4", "NUMEXPR_NUM_THREADS": "auto"}]


STOPPED_CHILD = """\
import os, signal, sys, time
parent = os.getppid()

def stopped(signum, frame):
    print(f"child stopped by {signal.Signals(signum).name}", file=sys.stderr, flush=True)
    sys.exit(0)

signal.signal(signal.SIGTERM, stopped)
print("child started", file=sys.stderr, flush=True)
while os.getppid() == parent:  # until stopped (or orphaned: a failed test leaves none)
    time.sleep(0.2)
"""

RUN_TEE_PARENT = """\
import sys
from dlbench import subproc
print("parent started", flush=True)
subproc.run_tee([sys.executable, sys.argv[1]])
print("parent went on after its stop", flush=True)
"""


def test_a_stop_signal_reaches_what_run_workers_started_and_then_ends_the_runner(tmp_path):
    """run_workers runs torchrun through subproc.run_tee, in the runner's own process
    group: a stop sent to the runner alone (run outside the launcher, by hand or by a
    tool) must reach torchrun too (it stops its ranks), the runner waiting for it, then
    ending by the signal. Under the launcher, Snakemake's stop kills the runner's whole
    group instead. A stand-in child takes torchrun's place: torchrun's own handling is
    not exercised."""
    child = tmp_path / "child.py"
    child.write_text(STOPPED_CHILD)
    parent = subprocess.Popen([sys.executable, "-c", RUN_TEE_PARENT, str(child)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert parent.stderr.readline() == "child started\n"
        parent.send_signal(signal.SIGTERM)
        out, err = parent.communicate(timeout=60)  # the child alone would never end
    finally:
        parent.kill()
    assert err == "child stopped by SIGTERM\n"
    assert parent.returncode == -signal.SIGTERM
    assert out == "parent started\n"
