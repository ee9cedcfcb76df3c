"""MXNet's distributed kvstores (``--kv_store dist_sync | dist_device_sync | dist_async``,
seed 002): the parameter-server processes a cell needs, started by dlbench.

ps-lite, under MXNet's kvstore, has three roles, each told by ``DMLC_*`` variables: one
scheduler (where every process meets), servers (they hold the weights and apply the
updates) and workers (they run the model). An MXNet process whose ``DMLC_ROLE`` is
``server`` or ``scheduler`` serves from ``import mxnet`` on and exits once the workers
have finished. A cell runs one server and one worker per node (the worker drives the
node's ``num_gpus`` devices):

- one node: the scheduler, the server and the worker are processes of this machine,
  meeting on loopback, so these seed flags work on a workstation too;
- ``num_nodes`` > 1 (a Slurm job, ``dlbench.multinode``): the scheduler runs here, and
  srun starts on every node ``python -m dlbench.mxnet.dist`` (``node_main``), which runs
  that node's server and worker.

Each worker writes its own result document (``parts``) and prints no DLBS lines; ``merge``
makes the cell's: the slowest worker's time for every iteration (a synchronous step is as
slow as its slowest worker), the samples of all workers, and every worker's host and
kvstore rank, one node's too. ``launch`` prints the cell's DLBS lines, once.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dlbench import harness, multinode, subproc
from dlbench import result as R

# After the workers end, the scheduler and servers get this long to follow (they exit when
# the workers finalise); then they are stopped, so that a cell leaves no process behind.
ROLE_EXIT_GRACE_S = 20.0
# Set in the environment of the workers ``launch`` starts: a worker of this cell, whose
# document is a part of the cell's result (a worker started by MXNet's own tools, without
# it, prints its DLBS lines itself).
PART_WORKER = "DLBENCH_MXNET_PART_WORKER"


def role_env(role: str, root_uri: str, root_port: int, nodes: int,
             base: Mapping[str, str]) -> dict[str, str]:
    """The environment of one ps-lite process: its role and where the scheduler is."""
    part = {PART_WORKER: "1"} if role == "worker" else {}
    return {**base, "DMLC_ROLE": role, "DMLC_PS_ROOT_URI": root_uri,
            "DMLC_PS_ROOT_PORT": str(root_port), "DMLC_NUM_SERVER": str(nodes),
            "DMLC_NUM_WORKER": str(nodes), **part}


def writes_part(environ: Mapping[str, str]) -> bool:
    """Whether this process is a worker ``launch`` started, writing a part."""
    return environ.get("DMLC_ROLE") == "worker" and environ.get(PART_WORKER) == "1"


def serve_command(python: str) -> list[str]:
    """A scheduler or server: importing mxnet with DMLC_ROLE set is all it takes."""
    return [python, "-c", "import mxnet"]


def with_output(argv: Sequence[str], output: str) -> list[str]:
    """The runner's argv with its --output replaced."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == "--output":
            skip = True
            continue
        if arg.startswith("--output="):
            continue
        out.append(arg)
    return [*out, f"--output={output}"]


def parts_dir(output: Path | None) -> Path:
    """Where the workers write their documents: beside the result (a cluster's shared
    file system, for a multi-node cell)."""
    if output is None:
        return Path(f".dlbench-mxnet-parts.{os.getpid()}").absolute()
    return output.with_name(f".{output.name}.{os.getpid()}.parts")


def part_path(folder: Path, node: int) -> Path:
    return folder / f"node{node}.json"


def _stop(procs: Sequence[subprocess.Popen], grace_s: float) -> None:
    deadline = time.monotonic() + grace_s
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            subproc.kill_group(proc.pid, 15)
    for proc in procs:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            subproc.kill_group(proc.pid)
            proc.wait()


def _start(cmd: Sequence[str], env: Mapping[str, str]) -> subprocess.Popen:
    # Its own group, killed if we die: nothing of the cell outlives it.
    return subprocess.Popen(list(cmd), env=dict(env), start_new_session=True,
                            preexec_fn=subproc.child_setup())


def launch(args: argparse.Namespace, argv: Sequence[str], cell: dict[str, Any]) -> int:
    """The parent of a dist_* cell: start the roles, wait for the workers, merge."""
    output = Path(args.output) if args.output else None
    if output:
        output.unlink(missing_ok=True)
    nodes = args.num_nodes
    folder = parts_dir(output)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    python = sys.executable
    roles: list[subprocess.Popen] = []
    try:
        if nodes > 1:
            alloc = multinode.slurm_allocation(nodes)
            root, base = alloc.address, dict(os.environ)
        else:
            # Loopback: each process says so itself (ps-lite would look for a network card).
            root, base = "127.0.0.1", {**os.environ, "DMLC_NODE_HOST": "127.0.0.1"}
        port = multinode.free_port()
        roles.append(_start(serve_command(python), role_env("scheduler", root, port, nodes,
                                                             base)))
        worker_argv = [python, "-m", "dlbench.mxnet",
                       *with_output(argv, str(part_path(folder, 0)))]
        if nodes == 1:
            roles.append(_start(serve_command(python), role_env("server", root, port, 1, base)))
            rc, lines = subproc.run_tee(worker_argv, role_env("worker", root, port, 1, base))
        else:
            node_cmd = [python, "-m", "dlbench.mxnet.dist", f"--parts={folder}", "--",
                        *with_output(argv, str(folder / "node{node_rank}.json"))]
            gpus = args.num_gpus if args.device == "gpu" else 0
            cmd = alloc.srun(nodes, multinode.agent(alloc.here, gpus, node_cmd))
            print(f"dlbench.mxnet: {nodes} nodes of Slurm job {alloc.job_id} "
                  f"({','.join(alloc.hosts[:nodes])}), scheduler at {root}:{port}",
                  file=sys.stderr, flush=True)
            rc, lines = subproc.run_tee(cmd, role_env("worker", root, port, nodes, base))
        # A worker that failed (bad input, before it joined the kvstore) leaves the
        # scheduler and server waiting for it: no grace to wait out for them then.
        _stop(roles, ROLE_EXIT_GRACE_S if rc == 0 else 0)
        lines = [multinode.unlabelled(line) for line in lines]
        res = merge(cell, args, folder, nodes, rc, lines)
        if output:
            keep_series(res, folder, output)
    except multinode.MultiNodeError as exc:
        res = _failed(cell, args, str(exc))
        rc = 1
    finally:
        _stop(roles, 0)
        shutil.rmtree(folder, ignore_errors=True)
    if output:
        R.write(res, output)
    from dlbench import cellrun
    from dlbench.mxnet.runner import print_dlbs_version

    # The workers printed none of these: the cell's lines, once.
    version = (res.get("environment") or {}).get("framework_version")
    if version:
        print_dlbs_version(version)
    cellrun.print_dlbs_summary(res)
    return rc if res["status"] != "ok" else 0


def _failed(cell: dict[str, Any], args: argparse.Namespace, message: str,
            status: str = "failed", reported: dict[str, Any] | None = None) -> dict[str, Any]:
    """A failed result; ``reported``: the environment a worker recorded (MXNet's version
    and build), kept, else this process's own (which has not imported MXNet)."""
    from dlbench import environment

    res = R.new_result(kind="model", cell=cell, study=args.study, cell_id=args.cell_id)
    R.finish(res, status, message)
    res["environment"] = reported or {**environment.collect(), "framework": "mxnet"}
    return res


def keep_series(res: dict[str, Any], folder: Path, output: Path) -> None:
    """The first worker's monitor series becomes the cell's (the parts folder goes)."""
    from dlbench import atomic, monitor

    summary = (res.get("extra") or {}).get("monitor") or {}
    name = summary.get("series_file")
    if not name or not (folder / name).exists():
        return
    target = atomic.write_bytes(monitor.series_path(output), (folder / name).read_bytes())
    summary["series_file"] = target.name


def by_kvstore_rank(measures: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The workers' measurements (read in node order) in kvstore rank order, the order
    ``data_wait_rank`` and ``ranks_data_wait_s`` speak of: the kvstore numbers its workers
    as they join, not by node. In node order where a worker's rank is missing."""
    ranks = [m["extra"].get("rank") for m in measures]
    if sorted(r for r in ranks if isinstance(r, int)) != list(range(len(measures))):
        return list(measures)
    return [m for _, m in sorted(zip(ranks, measures, strict=True), key=lambda p: p[0])]


def merge(cell: dict[str, Any], args: argparse.Namespace, folder: Path, nodes: int, rc: int,
          lines: Sequence[str]) -> dict[str, Any]:
    """The cell's result from its workers' documents (node0.json ... in ``folder``)."""
    docs = []
    for node in range(nodes):
        path = part_path(folder, node)
        try:
            docs.append(R.read(path))
        except (OSError, ValueError):
            docs.append(None)
    bad = [(i, d) for i, d in enumerate(docs) if d is None or d["status"] != "ok"]
    if bad:
        errors = multinode.reported_errors(lines)
        reported = [(i, d) for i, d in bad if d is not None]
        if reported:
            i, doc = reported[0]
            host = (doc.get("environment") or {}).get("hostname", f"node {i}")
            where = f"worker on {host}: " if nodes > 1 else ""
            return _failed(cell, args, f"{where}{doc.get('error')}", doc["status"],
                           doc.get("environment"))
        if nodes > 1:
            return _failed(cell, args, multinode.failure_message(rc, lines, errors))
        return _failed(cell, args, errors[0] if errors else
                       f"the MXNet worker wrote no result (exit code {rc})")
    first = docs[0]
    measures = [d["measurements"][0] for d in docs]
    slowest = [max(times) for times in zip(*(m["times_s"] for m in measures), strict=True)]
    m0 = measures[0]
    hosts = [(d.get("environment") or {}).get("hostname") for d in docs]

    def total(key: str) -> float | None:
        values = [m.get(key) for m in measures]
        return None if any(v is None for v in values) else sum(values)

    extra = {**m0["extra"], "hosts": hosts, "num_hosts": len(set(hosts)),
             "worker_ranks": [m["extra"].get("rank") for m in measures]}
    wait, compute = m0["data_wait_s"], m0["compute_s"]
    if all(m.get("data_wait_s") is not None and m.get("compute_s") is not None
           for m in measures):  # real data: the split of the worker that waited longest
        split = harness.input_split([(m["data_wait_s"], m["compute_s"])
                                     for m in by_kvstore_rank(measures)])
        wait, compute = split.data_wait_s, split.compute_s
        extra.update(split.facts())
    merged = R.measurement(
        name=m0["name"], pass_=m0["pass"], times_s=slowest,
        items_per_iteration=total("items_per_iteration"), parameters=m0["parameters"],
        throughput_unit=m0["throughput_unit"],
        flops_per_iteration=total("flops_per_iteration"),
        data_wait_s=wait, compute_s=compute, extra=extra)
    return {**first, "measurements": [merged], "extra": _node0_monitor(first, nodes)}


def _node0_monitor(first: dict[str, Any], nodes: int) -> dict[str, Any]:
    """Worker 0's extra, its monitor's energy said to be node 0's where the cell spans
    several nodes: the row's throughput is every worker's, the monitor saw one node."""
    from dlbench import monitor

    extra = dict(first.get("extra") or {})
    summary = extra.get("monitor")
    if nodes > 1 and isinstance(summary, dict) and summary.get("enabled"):
        extra["monitor"] = dict(summary)
        monitor.scope_energy_note(extra["monitor"], (
            f"node 0 of {nodes}: its worker's samples and its GPUs' and host's energy (not "
            "the parameter server's process)"))
    return extra


def node_main(argv: list[str] | None = None) -> int:
    """``python -m dlbench.mxnet.dist --parts DIR -- RUNNER-ARGS``: one node's server and
    worker of a multi-node cell (srun starts it on every node, with the scheduler's
    DMLC_* variables)."""
    p = argparse.ArgumentParser(prog="python -m dlbench.mxnet.dist")
    p.add_argument("--parts", required=True, type=Path)
    p.add_argument("runner_args", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    runner_args = args.runner_args[1:] if args.runner_args[:1] == ["--"] else args.runner_args
    env = dict(os.environ)
    server = _start(serve_command(sys.executable), {**env, "DMLC_ROLE": "server"})
    try:
        worker = subprocess.run([sys.executable, "-m", "dlbench.mxnet", *runner_args],
                                env={**env, "DMLC_ROLE": "worker"}, check=False)
        rc = worker.returncode
    finally:
        _stop([server], ROLE_EXIT_GRACE_S)
    if rc != 0:
        print(f"dlbench.mxnet.dist: worker {subproc.exit_words(rc)}", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(node_main())
