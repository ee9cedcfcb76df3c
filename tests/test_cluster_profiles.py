"""The cluster profiles and what a cluster run asks of the scheduler, without one: the
settings Snakemake reads from the profiles, the submit forms docs/clusters.md gives for
other schedulers (run against test doubles), the resources and threads of the cells' jobs
(dry runs through the cluster-generic executor), what reaches Apptainer, and the refusal
of multi-node cells in container images."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from dlbench import cpu, launch, study
from dlbench import workflow_support as support

REPO = Path(__file__).resolve().parents[1]
PROFILES = REPO / "profiles"
GENERIC_PROFILE = PROFILES / "cluster-generic"


# The profiles as Snakemake reads them ----------------------------------------------------


@pytest.mark.parametrize("profile", ["slurm", "cluster-generic"])
def test_the_cluster_profiles_latency_wait_is_not_replaced_by_the_workflow_profile(profile):
    """Snakemake reads the workflow profile (profiles/default) after --profile, and its
    keys win: the cluster profile's wait for outputs on a shared file system must stay."""
    from snakemake.cli import get_argument_parser

    own = yaml.safe_load((PROFILES / profile / "config.yaml").read_text())["latency-wait"]
    parser = get_argument_parser(profiles=[str(PROFILES / profile), str(PROFILES / "default")])
    assert own == 60 and parser.parse_args([]).latency_wait == own


# The submit forms of docs/clusters.md ---------------------------------------------------

# A scheduler's submit command as a test double: it notes the job script it was given (as
# its last argument, or on its standard input) and prints what the real one prints.
SUBMITTER = """#!/bin/sh
for last; do :; done
if [ -f "$last" ]; then cat "$last" > "{seen}"; else cat > "{seen}"; fi
echo '{prints}'
"""
PRINTS = {"qsub": "4242", "bsub": "Job <4242> is submitted to queue <normal>."}


def documented_submit_forms():
    """Each row of the table of submit forms in docs/clusters.md: (scheduler, command)."""
    forms = {}
    for line in (REPO / "docs" / "clusters.md").read_text().splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) == 4 and cells[1].startswith("`") and cells[0] != "scheduler":
            forms[cells[0]] = cells[1].strip("`").replace(r"\|", "|")
    return forms


@pytest.mark.parametrize("scheduler", ["PBS Pro", "LSF", "SGE"])
def test_each_documented_submit_form_hands_over_the_job_script_and_prints_the_id(
        tmp_path, scheduler):
    """As snakemake-executor-plugin-cluster-generic runs it: the formatted command, the job
    script appended in double quotes, through a shell."""
    command = documented_submit_forms()[scheduler]
    tool = command.removeprefix("sh -c '").split()[0]
    bin_dir, seen = tmp_path / "bin", tmp_path / "seen"
    bin_dir.mkdir()
    (bin_dir / tool).write_text(SUBMITTER.format(seen=seen, prints=PRINTS[tool]))
    (bin_dir / tool).chmod(0o755)
    jobscript = tmp_path / "snakejob.benchmark_pytorch.1.sh"
    jobscript.write_text("#!/bin/sh\n# the job\n")
    resources = SimpleNamespace(gpus_per_node=1, mem_mb=16000, runtime=60)
    submit = command.format(rule="benchmark_pytorch", threads=8, resources=resources)
    done = subprocess.run(f'{submit} "{jobscript}"', shell=True, capture_output=True,
                          text=True, timeout=30,
                          env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})
    assert (done.returncode, done.stdout) == (0, "4242\n"), done.stderr
    assert seen.read_text() == jobscript.read_text()


# The cells' jobs on a cluster (dry runs) ------------------------------------------------


def cluster_dry_run(workdir, config, *args):
    """A dry run through the cluster-generic profile, with an `sinfo` that cannot tell (so
    that no real cluster is asked): Snakemake's output."""
    bin_dir = workdir / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "sinfo").write_text("#!/bin/sh\nexit 1\n")
    (bin_dir / "sinfo").chmod(0o755)
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--profile", str(GENERIC_PROFILE),
         "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
         "--configfile", str(workdir / "config.yaml"), *args],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})


def benchmark_jobs(output):
    """Each benchmark job of a dry run's output: (rule, cell file, threads, resources)."""
    jobs = []
    for block in re.split(r"^(?=(?:local)?rule )", output, flags=re.MULTILINE):
        rule = re.match(r"rule (benchmark_\w+):", block)
        if rule:
            cell = re.search(r"output: \S+/cells/(\S+)\.json", block)[1]
            threads = re.search(r"^\s+threads: (\d+)$", block, re.MULTILINE)
            resources = re.search(r"^\s+resources: (.*)$", block, re.MULTILINE)[1]
            jobs.append((rule[1], cell, int(threads[1]) if threads else 1,
                         dict(kv.split("=", 1) for kv in resources.split(", "))))
    return jobs


def test_every_cells_job_asks_for_its_nodes(tmp_path):
    """One-node cells beside a two-node one still ask for nodes=1 (cluster-generic's
    --nodes={resources.nodes}), in every round; every cell job asks for the profile's
    set-threads (16; the launcher caps the threads at the CPUs a job is given)."""
    grid = {"model": "deep_mnist", "batch_size": 2, "num_batches": 2, "num_warmup_batches": 1}
    config = {"repeats": 2, "studies": {
        "gpu": {"grid": {**grid, "device": "gpu", "num_gpus": [1, 2], "num_nodes": [1, 2]}},
        "cpu": {"grid": {**grid, "device": "cpu"}}}}
    # --cores: a dry run's default of 1 would cap every job's threads.
    done = cluster_dry_run(tmp_path, config, "--cores", "64")
    assert done.returncode == 0, done.stderr[-3000:]
    jobs = benchmark_jobs(done.stdout + done.stderr)
    assert sorted({rule for rule, *_ in jobs}) == ["benchmark_pytorch", "benchmark_pytorch_r1"]
    assert len(jobs) == 10
    for _, cell, threads, resources in jobs:
        nodes = 2 if "_2nodes_" in cell else 1
        assert resources["nodes"] == str(nodes), cell
        assert threads == 16, cell


def test_a_jobs_thread_counts_are_capped_at_the_cpus_it_may_use():
    """Slurm gives a GPU cell's job cpus_per_gpu x its GPUs, Snakemake sets OMP_NUM_THREADS
    and friends to the rule's threads: the launcher caps them at the job's CPUs (its
    affinity), so the runner's libraries do not oversubscribe them."""
    environ = {"OMP_NUM_THREADS": "16", "MKL_NUM_THREADS": "4", "OPENBLAS_NUM_THREADS": "x"}
    assert launch.thread_caps(environ, cpus=8) == {"OMP_NUM_THREADS": "8"}
    assert launch.thread_caps(environ, cpus=16) == {}
    assert cpu.usable_cpus() == len(os.sched_getaffinity(0))


def test_a_multi_node_cell_in_a_container_image_is_refused_and_cleanenv_named(tmp_path):
    (tmp_path / "pytorch.sif").write_text("")
    config = {"frameworks": {"pytorch": {"container": str(tmp_path / "pytorch.sif")}},
              "studies": {"scale": {"grid": {"model": "deep_mnist", "num_gpus": 1,
                                             "num_nodes": [1, 2]}}}}
    done = cluster_dry_run(tmp_path, config, "--use-apptainer",
                           "--apptainer-args=--nv --cleanenv")
    assert done.returncode == 1
    lines = [line for line in done.stderr.splitlines() if line.startswith("dlbench config")]
    assert lines == [
        "dlbench config warning: apptainer-args: --cleanenv starts each cell's container "
        "without CUDA_VISIBLE_DEVICES, DLBENCH_GPU_ALLOCATION, DLBENCH_GPU_LOCK_DIR, "
        "SLURM_JOB_ID: a GPU cell may then use GPUs its job was not given; leave --cleanenv "
        "out",
        "dlbench config error: study 'scale': num_nodes: 2 nodes cannot run in a container "
        "image (--use-apptainer with frameworks.pytorch.container): srun starts each node's "
        "task on the host, outside the image; run the study without --use-apptainer",
    ], done.stderr[-3000:]


# Apptainer arguments ---------------------------------------------------------------------


@pytest.mark.parametrize("args, binds", [
    ("--nv", []),
    ("--nv --bind /scratch/tools", [("/scratch/tools", "/scratch/tools")]),
    ("-B /a,/b:/mnt/b:ro --bind=/c -B/d -B=/e",
     [("/a", "/a"), ("/b", "/mnt/b"), ("/c", "/c"), ("/d", "/d"), ("/e", "/e")]),
    ("--bind '/with space'", [("/with space", "/with space")]),
])
def test_apptainer_binds_are_read_from_the_arguments(args, binds):
    assert support.apptainer_binds(args) == binds


@pytest.mark.parametrize("args, path, bound", [
    # A bind of a longer path is no bind of this one.
    ("--nv --bind /scratch/tools", "/scratch", False),
    ("--nv --bind /scratch", "/scratch", True),
    ("--bind=/scratch", "/scratch/data", True),  # a folder above it
    ("-B /data,/scratch:/scratch:ro", "/scratch", True),
    ("-B /scratch:/mnt", "/scratch", False),  # elsewhere inside the container
    ("--env X=/scratch", "/scratch", False),
])
def test_a_folder_is_bound_again_unless_the_arguments_bind_it_where_it_is(args, path,
                                                                          bound):
    assert support.bound_in_container(args, Path(path)) is bound


def test_unreadable_apptainer_arguments_are_one_line_naming_them():
    with pytest.raises(support.WorkflowConfigError) as err:
        support.apptainer_binds("--nv --bind '/open")
    assert str(err.value).startswith("apptainer-args: ") and "\n" not in str(err.value)


@pytest.mark.parametrize("args, option", [
    ("--nv", None), ("--nv --cleanenv", "--cleanenv"), ("-e --nv", "-e"),
    ("--nv --containall", "--containall"), ("-C", "-C"), ("--cleanenv=false", None),
    ("--env CUDA_VISIBLE_DEVICES=0", None),
])
def test_arguments_that_clear_the_environment_are_named(args, option):
    warning = support.clean_environment_warning(args)
    if option is None:
        assert warning is None
    else:
        assert warning.startswith(f"apptainer-args: {option} starts each cell's container "
                                  "without CUDA_VISIBLE_DEVICES")


def test_a_missing_local_image_and_gpu_cells_started_without_nv_are_one_line_each(tmp_path):
    """What would fail every pending cell of a framework in an image is refused before any
    job (Apptainer itself is not run here): a local image that is not there, and GPU cells
    whose containers would start without the host's GPUs. A registry image is Apptainer's
    to pull, and CPU cells need no --nv."""
    cells = study.expand_config({"studies": {
        "gpu": {"grid": {"model": "deep_mnist", "device": "gpu"}},
        "cpu": {"grid": {"model": "deep_mnist", "device": "cpu", "framework": "mxnet"}}}})
    (tmp_path / "pytorch.sif").write_bytes(b"image")
    images = {"pytorch": "pytorch.sif", "mxnet": "docker://example.org/mxnet:1.9"}
    assert support.check_container_images(cells, "--nv --bind /scratch", images.get,
                                          tmp_path) == [
        "frameworks.mxnet.container: docker://example.org/mxnet:1.9 names a tag, not a "
        "digest: its results record the URI alone, which a rebuilt image under the tag keeps; "
        "pin it (...@sha256:<digest>) to tell images apart"]
    pinned = {**images, "mxnet": "docker://example.org/mxnet@sha256:" + "0" * 64}
    assert support.check_container_images(cells, "--nv", pinned.get, tmp_path) == []
    with pytest.raises(support.WorkflowConfigError) as refused:
        support.check_container_images(cells, "--bind /scratch", images.get, tmp_path)
    assert str(refused.value) == (
        "apptainer-args: no --nv (nor --nvccli, --rocm): the GPU cells of study 'gpu' would "
        "see no GPU in framework 'pytorch''s image; add --nv (the workflow profile's "
        "apptainer-args have it, a command line's replace them)")
    cpu_only = [c for c in cells if c.params["device"] == "cpu"]
    support.check_container_images(cpu_only, "", images.get, tmp_path)
    with pytest.raises(support.WorkflowConfigError,
                       match=rf"^frameworks.pytorch.container: missing.sif: no such image "
                             rf"\(relative to {tmp_path}\)$"):
        support.check_container_images(cells, "--nv", {"pytorch": "missing.sif"}.get,
                                       tmp_path)
    # No image given: under --use-apptainer its cells ran on the host without a word.
    assert support.check_container_images(cells, "--nv", lambda fw: "", tmp_path) == [
        f"frameworks.{fw}.container: none given: its cells run on the host, not in a "
        "container" for fw in ("pytorch", "mxnet")]
