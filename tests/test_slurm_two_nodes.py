"""Multi-node cells against a real two-node Slurm (tests/slurm/two_nodes.py): two slurmd,
each in its own network and UTS namespace, one slurmctld, on this machine.

A study of a two-node PyTorch DDP cell (gloo, CPU), two-node collective and point-to-point
cells (gloo, CPU) and a two-node MXNet ``dist_sync`` cell runs through ``--profile profiles/slurm``: each cell is one Slurm job of two nodes whose
runner starts a task per node with srun. Then a long cell runs and one node's worker is
killed: the cell must become a failed row naming that node, and nothing may be left
running on either node. Skipped without root, the Debian packages slurmctld, slurmd,
slurm-client and munge, iproute2, or network namespaces; the MXNet cell also needs the
MXNet environment (make mxnet-env).
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from dlbench import systems

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "slurm"))
from two_nodes import TwoNodeSlurm, missing_two_node_requirements  # noqa: E402

SLURM_PROFILE = REPO / "profiles" / "slurm"
GENERIC_PROFILE = REPO / "profiles" / "cluster-generic"
MXNET_PYTHON = REPO / ".venvs" / "mxnet" / "bin" / "python"
CELL = {"model": "deep_mnist", "device": "cpu", "batch_size": 4, "num_nodes": 2,
        "num_warmup_batches": 1}
COMMS_CELL = {"collective": "all_gather", "device": "cpu", "num_gpus": 2, "num_nodes": 2,
              "begin_size": 1024, "end_size": 65536, "step_factor": 8, "warmup": 1,
              "iterations": 3}


def snakemake(workdir, cluster, *args, timeout=600, profile=SLURM_PROFILE):
    polling = (["--slurm-init-seconds-before-status-checks", "2"] if profile == SLURM_PROFILE
               else ["--seconds-between-status-checks", "2"])
    cmd = [sys.executable, "-m", "snakemake", "results/benchmarks.parquet", "--snakefile",
           str(REPO / "Snakefile"), "--directory", str(workdir), "--configfile",
           str(workdir / "config.yaml"), "--profile", str(profile),
           "--resources", "benchmark_slot=4", *polling, *args]
    return subprocess.run(cmd, env=cluster.env, capture_output=True, text=True,
                          timeout=timeout)


def rows(workdir):
    return {r["study"]: r for r in
            pq.read_table(workdir / "results" / "benchmarks.parquet").to_pylist()}


def result_of(workdir, study):
    (path,) = (workdir / "results" / systems.default_label() / study / "cells").glob("*.json")
    import json

    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def cluster():
    why = missing_two_node_requirements()
    if why:
        pytest.skip(why)
    # The profiles ask 16 threads for a CPU cell and 8 cores per GPU.
    slurm = TwoNodeSlurm(cpus=16, gpus=2)
    try:
        yield slurm.start()
    finally:
        slurm.stop()  # daemons, namespaces, links, bridge: also when a test failed


@pytest.fixture(scope="module")
def two_node_run(cluster, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("two-nodes")
    studies = {"ddp": {"grid": {**CELL, "num_batches": 3}},
               # The nodes' GPUs are fakes: Slurm gives each node one, no CUDA is behind it.
               "gpu": {"grid": {**CELL, "device": "gpu", "num_batches": 3}},
               "comms": {"kind": "comms", "grid": COMMS_CELL},
               "p2p": {"kind": "comms", "grid": {**COMMS_CELL, "collective": "pt2pt",
                                                 "pt2pt": "pairwise", "window": 4,
                                                 "validate": True}}}
    if MXNET_PYTHON.exists():
        studies["ps"] = {"grid": {**CELL, "framework": "mxnet", "kv_store": "dist_sync",
                                  "num_batches": 3}}
    config = {"frameworks": {"mxnet": {"python": str(MXNET_PYTHON)}}, "studies": studies}
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    proc = snakemake(workdir, cluster)
    assert proc.returncode == 0, proc.stderr[-4000:] + cluster.logs()
    return workdir


@pytest.mark.slow
def test_a_two_node_pytorch_ddp_cell_runs_as_one_slurm_job_on_both_nodes(cluster, two_node_run):
    row = rows(two_node_run)["ddp"]
    assert row["status"] == "ok", row["error"]
    assert row["num_nodes"] == 2 and row["throughput"] > 0
    measurement = result_of(two_node_run, "ddp")["measurements"][0]
    assert measurement["extra"]["world_size"] == 2
    assert sorted(measurement["extra"]["hosts"]) == ["node1", "node2"]
    # Effective batch: batch_size on each of the two ranks.
    assert measurement["items_per_iteration"] == 2 * CELL["batch_size"]
    jobs = subprocess.run(["scontrol", "-o", "show", "job"], env=cluster.env,
                          capture_output=True, text=True, timeout=30).stdout.splitlines()
    (job,) = [j for j in jobs if "wildcards_ddp_" in j]
    assert "NumNodes=2 " in job and "NodeList=node[1-2]" in job


@pytest.mark.slow
def test_a_two_node_collective_cell_runs_its_processes_on_both_nodes(cluster, two_node_run):
    """Two processes on each of two nodes (four ranks, srun starting torchrun on each):
    bus bandwidth with all_gather's factor for four ranks, (n-1)/n."""
    res = result_of(two_node_run, "comms")
    assert res["status"] == "ok", res.get("error")
    assert res["cell"]["num_nodes"] == 2 and res["extra"]["ranks"] == 4
    assert sorted(res["extra"]["hosts"]) == ["node1", "node1", "node2", "node2"]
    assert res["extra"]["bus_factor"] == 0.75
    assert [m["bytes_per_iteration"] for m in res["measurements"]] == [1024, 8192, 65536]
    row = rows(two_node_run)["comms"]
    assert row["num_nodes"] == 2 and row["bus_gbps"] > 0
    jobs = subprocess.run(["scontrol", "-o", "show", "job"], env=cluster.env,
                          capture_output=True, text=True, timeout=30).stdout.splitlines()
    (job,) = [j for j in jobs if "all-gather_float32_2x_2nodes_cpu" in j]
    assert "NumNodes=2 " in job and "NodeList=node[1-2]" in job, job


@pytest.mark.slow
def test_a_pairwise_point_to_point_cell_pairs_each_process_with_one_on_the_other_node(
        cluster, two_node_run):
    """pt2pt pairwise on two nodes of two processes: rank i with i + 2, so every pair
    crosses the link between the nodes; every test of every size validated."""
    res = result_of(two_node_run, "p2p")
    assert res["status"] == "ok", res.get("error")
    hosts = res["extra"]["hosts"]
    assert res["extra"]["pairs"] == [[0, 2], [1, 3]]
    assert all(hosts[a] != hosts[b] for a, b in res["extra"]["pairs"]), hosts
    assert {m["pass"] for m in res["measurements"]} == {"latency", "unidirectional",
                                                       "bidirectional"}
    # a latency test is a time, no bandwidth (null)
    assert len(res["measurements"]) == 9 and all(
        m["extra"]["validated"] and (m["gbps"] is None if m["pass"] == "latency"
                                     else m["gbps"] > 0) for m in res["measurements"])


@pytest.mark.slow
def test_a_two_node_gpu_cell_asks_slurm_for_its_gpus_on_each_node(cluster, two_node_run):
    """The job holds num_gpus GPUs on each of its nodes (--gres per node, --gpus in all);
    the runs themselves fail (the GPUs are fakes): a failed row, not a lost job."""
    jobs = subprocess.run(["scontrol", "-o", "show", "job"], env=cluster.env,
                          capture_output=True, text=True, timeout=30).stdout.splitlines()
    (job,) = [j for j in jobs if "gpu1_2nodes" in j]
    assert "NumNodes=2 " in job and "TresPerNode=gres:gpu:1" in job, job
    assert "TresPerJob=gres:gpu:2" in job, job
    row = rows(two_node_run)["gpu"]
    assert row["status"] == "failed" and "CUDA is not available" in row["error"], row["error"]


@pytest.mark.slow
def test_a_two_node_mxnet_dist_sync_cell_has_a_worker_on_each_node(cluster, two_node_run):
    if not MXNET_PYTHON.exists():
        pytest.skip(f"no MXNet environment at {MXNET_PYTHON} (make mxnet-env)")
    row = rows(two_node_run)["ps"]
    assert row["status"] == "ok", row["error"]
    assert row["num_nodes"] == 2 and row["throughput"] > 0
    extra = result_of(two_node_run, "ps")["measurements"][0]["extra"]
    assert extra["num_workers"] == 2 and sorted(extra["hosts"]) == ["node1", "node2"]
    assert sorted(extra["worker_ranks"]) == [0, 1]


@pytest.mark.slow
def test_the_cluster_generic_profile_runs_a_two_node_cell_too(cluster, tmp_path_factory):
    """The generic executor's submit command asks for the cell's nodes with one task and
    num_gpus GPUs each (--gpus-per-node: a total could land unevenly); the job's command
    starts the nodes' tasks with srun as under the Slurm executor. The GPU cell's GPUs are
    fakes: its run fails (a failed row), what Slurm allocated is what is checked."""
    workdir = tmp_path_factory.mktemp("generic")
    config = {"studies": {"ddp": {"grid": {**CELL, "num_batches": 3}},
                          "gpu": {"grid": {**CELL, "device": "gpu", "num_batches": 3}},
               "comms": {"kind": "comms", "grid": COMMS_CELL},
               "p2p": {"kind": "comms", "grid": {**COMMS_CELL, "collective": "pt2pt",
                                                 "pt2pt": "pairwise", "window": 4,
                                                 "validate": True}}}}
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    proc = snakemake(workdir, cluster, profile=GENERIC_PROFILE)
    assert proc.returncode == 0, proc.stderr[-4000:] + cluster.logs()
    row = rows(workdir)["ddp"]
    assert row["status"] == "ok", row["error"]
    extra = result_of(workdir, "ddp")["measurements"][0]["extra"]
    assert sorted(extra["hosts"]) == ["node1", "node2"] and extra["world_size"] == 2
    jobs = subprocess.run(["scontrol", "-o", "show", "job"], env=cluster.env,
                          capture_output=True, text=True, timeout=30).stdout.splitlines()
    (job,) = [j for j in jobs if f"WorkDir={workdir} " in j and "TresPerNode=gres:gpu:1" in j]
    assert "NumNodes=2 " in job and "NodeList=node[1-2]" in job, job
    row = rows(workdir)["gpu"]
    assert row["status"] == "failed" and "CUDA is not available" in row["error"], row["error"]


@pytest.mark.slow
def test_a_node_whose_worker_dies_makes_a_failed_row_naming_it_and_leaves_nothing(
        cluster, two_node_run, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("killed")
    config = {"studies": {"long": {"grid": {**CELL, "num_batches": 100000}}}}
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    cmd = [sys.executable, "-m", "snakemake", "results/benchmarks.parquet", "--snakefile",
           str(REPO / "Snakefile"), "--directory", str(workdir), "--configfile",
           str(workdir / "config.yaml"), "--profile", str(SLURM_PROFILE),
           "--slurm-init-seconds-before-status-checks", "2"]
    proc = subprocess.Popen(cmd, env=cluster.env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    killed = None
    try:
        deadline = time.monotonic() + 180
        while killed is None:
            assert proc.poll() is None, proc.stdout.read()[-3000:]
            assert time.monotonic() < deadline, "the cell's worker never started on node2"
            for pid in cluster.pids_in("node2"):
                try:
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                # A rank torchrun started (not torchrun itself): "-m dlbench.pytorch".
                if b"dlbench.pytorch" in cmdline and b"torch.distributed.run" not in cmdline:
                    os.kill(pid, signal.SIGKILL)
                    killed = pid
                    break
            time.sleep(0.5)
        output, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, output[-4000:]
    row = rows(workdir)["long"]
    assert row["status"] == "failed"
    assert "node2" in row["error"], row["error"]
    deadline = time.monotonic() + 30
    while any(cluster.job_processes(n) for n in cluster.nodes) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert {n: cluster.job_processes(n) for n in cluster.nodes} == {"node1": [], "node2": []}
    assert cluster.queue() == []
