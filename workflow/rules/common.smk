import functools
import inspect
import itertools
import json
import math
import os
import re
import shlex
import shutil
import sys
from pathlib import Path

from snakemake.common import overwrite_function_params
from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version, validate
from snakemake_interface_executor_plugins.settings import DeploymentMethod

from dlbench import config_schema
from dlbench import cpu as dlbench_cpu
from dlbench import frameworks as dlbench_frameworks
from dlbench import gpus as dlbench_gpus
from dlbench import incomplete_run as dlbench_incomplete_run
from dlbench import kinds as dlbench_kinds
from dlbench import launch as dlbench_launch
from dlbench import slurm_nodes as dlbench_slurm_nodes
from dlbench import study as dlbench_study
from dlbench import systems as dlbench_systems
from dlbench import workflow_support as support
from dlbench.datasets import DatasetError
from dlbench.datasets import quick as dataset_quick

min_version("9.14")

# The repository: this workflow's sources, and the environments and images `make` builds.
REPOSITORY = Path(workflow.main_snakefile).resolve().parent


def _config_error(exc):
    # One line naming the study and the field, before any job runs.
    print(f"dlbench config error: {exc}", file=sys.stderr)
    raise SystemExit(1) from None


for _configfile in workflow.configfiles:
    for _line in config_schema.duplicate_keys(Path(_configfile)):
        print(f"dlbench config warning: {_line}", file=sys.stderr)
try:
    # Our own check first: one line naming the field (Snakemake's prints the whole config).
    config_schema.validate_config(
        config,
        Path(workflow.main_snakefile).parent / "workflow/schemas/config.schema.yaml",
    )
except support.WorkflowConfigError as exc:
    _config_error(exc)
validate(config, schema="../schemas/config.schema.yaml")


try:
    CELLS = support.expand_cells(config)
    # SYSTEM: the machine this run's results belong to, results/<SYSTEM>/<study>/
    # (dlbench.systems); REPEATS: how many times each study's cells run (separate
    # processes: dlbench.study.repeats).
    TIMEOUTS, RETRY, SYSTEM, REPEATS, UNSTABLE_CV, MONITOR_OPTION = (
        support.run_settings(config)
    )
    # Inherited by the jobs: a cluster job runs on another host, whose name would be
    # another label (dlbench.systems.label_of).
    os.environ[dlbench_systems.LABEL_ENV] = SYSTEM
except support.WorkflowConfigError as exc:
    _config_error(exc)
CELLS_BY_ID = {(cell.study, cell.id): cell for cell in CELLS}


def job_function(func):
    """Mark a function Snakemake calls per job (input, params, resources). Snakemake asks
    it for its parameter names several times per job (inspect.signature, ~50 us each):
    seconds of a 10,000-cell dry run. snakemake.common.overwrite_function_params states
    them once (Snakemake's own helpers use it); benchmarks/dry_run_scaling.py measures
    the workflow's cost per job."""
    overwrite_function_params(func, inspect.signature(func).parameters)
    return func


wildcard_constraints:
    study=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    cell=r"[^/]+",
    dataset=r"[A-Za-z0-9][A-Za-z0-9_.-]*",


def literal(value):
    """A constant param (a string or a list of them) given to Snakemake as it is. Snakemake
    fills every {name} in a param's strings from the job's wildcards and stops the run on
    any other name: an interpreter under a folder named "{x}" would. A value with a brace
    is given as a function of the job instead, whose result Snakemake takes unchanged; the
    value it records (and compares, rerun-triggers: params) is the same either way, and a
    value without one costs nothing per job."""
    texts = value if isinstance(value, list) else [value]
    if any(isinstance(text, str) and "{" in text for text in texts):
        return job_function(lambda wildcards: value)
    return value


def cell_of(wildcards):
    return CELLS_BY_ID[(wildcards.study, wildcards.cell)]


# Every result this run wants, each cell once per repeat of its study: computed once, the
# all and aggregate rules both ask for it (10,000-cell studies).
CELL_RESULT_FILES = [str(path) for path in support.result_paths(CELLS, SYSTEM, REPEATS)]


def cell_result_files():
    return CELL_RESULT_FILES


# The frameworks the benchmark rules exist for: those with cells in this run. Each rule
# more is one more pattern Snakemake tries on every file it looks for (10,000-cell
# studies), and a framework without cells has no job to make.
FRAMEWORKS_IN_USE = [
    fw
    for fw in dlbench_frameworks.registry().values()
    if any(cell.params.get("framework") == fw.name for cell in CELLS)
]

# The repeat rounds the benchmark rules exist for (one rule per framework and round).
REPEAT_ROUNDS = max(REPEATS.values(), default=1)


# The studies of this run: those the config names and those of its cells (a calibration
# study the config implies), the benchmark rules' patterns. This system's other results
# are read as they are (results_beside_files, results_beside_in_own_studies).
OWN_STUDIES = sorted({*(config.get("studies") or {}), *(cell.study for cell in CELLS)})
OWN_STUDIES_PATTERN = "|".join(re.escape(name) for name in OWN_STUDIES)


@functools.cache
def _results_beside():
    """The results the table keeps that this run does not plan (support.results_beside),
    split: those no rule's pattern covers, and this system's of a study the run's cells
    imply (another config's calibration cells), which the benchmark rule's pattern covers:
    as inputs, Snakemake would ask that rule to make them, and the rule knows only this
    run's cells. Found once, at parse time (the files this run makes are not among them).
    """
    beside = support.results_beside(
        SYSTEM, config.get("studies") or {}, CELL_RESULT_FILES, say=_say_in_main_process
    )
    own = set(OWN_STUDIES)

    def covered(path):
        return (
            dlbench_systems.system_of(path) == SYSTEM
            and dlbench_systems.study_of(path) in own
        )

    return (
        [str(p) for p in beside if not covered(p)],
        [str(p) for p in beside if covered(p)],
    )


def _say_in_main_process(line):
    if workflow.is_main_process:
        print(line, file=sys.stderr)


def results_beside_files():
    return _results_beside()[0]


def results_beside_in_own_studies():
    return _results_beside()[1]


def _adopt_pre_system_results():
    """A results/ tree made before system labels (results/<study>/cells/) becomes this
    system's (results/<SYSTEM>/<study>/): its files move, no cell runs again. In the main
    process only (cluster jobs parse this file again)."""
    if not workflow.is_main_process:
        return
    for old, new in dlbench_systems.adopt(SYSTEM):
        print(
            f"dlbench: adopted {old} as system {SYSTEM!r}: now {new}", file=sys.stderr
        )
    for old in dlbench_systems.legacy_study_dirs():
        print(
            f"dlbench: {old} was left in place: results/{SYSTEM}/{old.name}/ already "
            "holds the same files",
            file=sys.stderr,
        )


_adopt_pre_system_results()


@functools.cache
def _command_line():
    """Snakemake's command line as its own parser reads it, its profiles' settings
    included; None where Snakemake runs through its Python API (or the line does not
    parse). Snakemake tells the workflow whether it is a dry run, and which executor runs
    its jobs, only after the workflow has been parsed. The parser's own lines (the
    profiles it uses) were printed once already: not again."""
    import contextlib
    import io

    from snakemake.cli import parse_args

    try:
        with (
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
        ):
            return parse_args(sys.argv[1:])[1]
    except (SystemExit, Exception):
        return None


def _dry_run():
    """Whether this run is a dry run (Snakemake's command line)."""
    return bool(getattr(_command_line(), "dryrun", False))


def _runs_no_jobs():
    """Whether this call plans no jobs (--unlock, --list-rules, --cleanup-metadata, ...),
    or will be refused them: another run holds Snakemake's lock on this folder (this file
    is read before Snakemake takes it). It then moves no result aside and removes no
    dataset (under the running one's feet), and says nothing of it."""
    return support.plans_no_jobs(_command_line()) or _locked_by_another_run()


@functools.cache
def _locked_by_another_run():
    if not workflow.is_main_process or getattr(_command_line(), "nolock", False):
        return False
    if support.snakemake_locked(Path(".snakemake/locks")):
        print(
            "dlbench: another Snakemake run holds this folder's lock: no result is set "
            "aside or dataset removed by this one",
            file=sys.stderr,
        )
        return True
    return False


@functools.cache
def pending_cells():
    """The cells without a result, looked up once (10,000 files): the cluster check and
    the progress watcher both ask, and no job runs before the watcher starts. Looked up
    again after _run_again moves results aside: those cells run too."""
    return support.pending(CELLS, SYSTEM, REPEATS)


def _run_again(paths, which, why=""):
    """The cells of these result files run again: each file moves to retried/ beside it
    and its log to logs/retried/ (kept, with the time), so the cells have none; a dry run
    only says how many would.
    ``which`` names them ("2 cell(s) recorded as failed"), ``why`` is the line's prefix.
    """
    if not paths or _runs_no_jobs():
        return
    if _dry_run():
        print(
            f"dlbench: {why}would run {which} again (their results are still there: "
            "Snakemake's dry run below does not count them)",
            file=sys.stderr,
        )
        return
    for path in paths:
        support.set_aside_run(path, "retried")
    pending_cells.cache_clear()
    print(f"dlbench: {why}running {which} again", file=sys.stderr)


def _retry_recorded_outcomes():
    """retry_failed: run the cells recorded as failed (or with the statuses listed) again.
    Decided in the main process only (cluster jobs parse this file again)."""
    if not RETRY or not workflow.is_main_process:
        return
    paths = support.results_to_retry(CELLS, RETRY, SYSTEM, REPEATS)
    _run_again(
        paths,
        f"{len(paths)} cell(s) recorded as {' or '.join(RETRY)}",
        "retry_failed: ",
    )


_retry_recorded_outcomes()


def _retry_failed_on_changed_data():
    """A failed cell that reads a user's ImageFolder tree runs again once something in the
    tree changed after it failed (a bad image mended in place, which leaves the folder's
    own mtime, all Snakemake compares, as it was). Main process only."""
    if not workflow.is_main_process:
        return
    paths = support.failed_on_changed_inputs(config, CELLS, SYSTEM, REPEATS)
    if paths:
        _run_again(
            paths,
            f"{len(paths)} failed cell(s) whose data changed since (first: {paths[0]})",
        )


_retry_failed_on_changed_data()


def _set_aside_invalid_results():
    """The result files of this run's cells the last aggregate found invalid move into
    invalid/ beside them, so that this run measures those cells again (main process; a
    dry run says how many it would); the others stay listed for the runs that plan them.
    """
    if not workflow.is_main_process or _runs_no_jobs():
        return
    if _dry_run():
        would = support.invalid_to_set_aside(CELL_RESULT_FILES)
        if would:
            print(
                f"dlbench: would move {len(would)} invalid result file(s) aside (first: "
                f"{would[0]}) and measure their cells again",
                file=sys.stderr,
            )
        return
    moved = support.set_aside_invalid(CELL_RESULT_FILES)
    if moved:
        print(
            f"dlbench: {len(moved)} invalid result file(s) moved aside (first: {moved[0]}); "
            "measuring their cells again",
            file=sys.stderr,
        )


_set_aside_invalid_results()


@functools.cache
def job_timeouts(framework):
    """Each study's launcher time limit (seconds) in the framework's cell jobs, and a line
    for each study whose limit the job's runtime lowered (support.job_timeouts): on a
    cluster, a cell outliving its job's time would be stopped by the scheduler, without
    a result; the launcher stops it first, and it becomes a failed row."""
    # A cluster job's command is formatted again in the job, by Snakemake processes that
    # see no cluster (not the main process) but the same settings.
    if not (cluster_run() or not workflow.is_main_process):
        return TIMEOUTS, {}
    name = first_round_rule(framework)
    runtime, _ = profile_settings(name).setting("runtime", name)
    minutes = runtime if isinstance(runtime, (int, float)) else None
    # Only the studies with cells of this framework run in its jobs: a runtime too short
    # for their cells is refused before any job, naming one of them.
    studies = {cell.study for cell in CELLS if cell.params["framework"] == framework}
    try:
        return support.job_timeouts(
            {study: TIMEOUTS[study] for study in sorted(studies)}, minutes, name
        )
    except support.WorkflowConfigError as exc:
        _config_error(exc)


def cell_timeout(framework):
    """The launcher's time limit (seconds): a constant when every study has the same one,
    so that Snakemake evaluates no function per job for it."""
    timeouts, _ = job_timeouts(framework)
    values = set(timeouts.values())
    if len(values) == 1:
        return math.ceil(values.pop())

    @job_function
    def timeout_of(wildcards):
        return math.ceil(timeouts[wildcards.study])

    return timeout_of


def _say_lowered_timeouts():
    """One line per study whose cells' time limit its cluster jobs' runtime lowers (in the
    main process only: a cluster job parses this file again)."""
    if not (workflow.is_main_process and cluster_run()):
        return
    pairs = {(cell.study, cell.params["framework"]) for cell in CELLS}
    for framework in sorted({fw for _, fw in pairs}):
        _, lowered = job_timeouts(framework)
        for name, line in sorted(lowered.items()):
            if (name, framework) in pairs:
                print(f"dlbench config warning: {line}", file=sys.stderr)


def framework_python(framework):
    """The interpreter of the framework's environment (DLBS's host_python_path)."""
    return support.framework_python(config, framework, REPOSITORY)


def cell_threads():
    """A timed cell has the machine to itself (benchmark_slot): all the cores Snakemake may
    use (workflow.cores, from --cores), so that OMP_NUM_THREADS and friends, which Snakemake
    sets to a job's threads, do not leave a CPU cell one core. Without --cores (a cluster
    run with --jobs), the cores of this machine. A constant, not a function of the job.
    """
    try:
        return workflow.cores
    except WorkflowError:
        return os.cpu_count() or 1


CELL_THREADS = cell_threads()


@functools.cache
def profile_settings(rule):
    """What set-threads and set-resources (a profile's or the command line's) give ``rule``,
    with the run's default-resources (support.RuleSettings); nothing where this Snakemake
    does not say. Fixed for the run, so read once per rule (the cluster check asks for
    every cell)."""
    settings = getattr(workflow, "resource_settings", None)
    if settings is None:
        return support.RuleSettings()
    threads, resources = settings.overwrite_threads, settings.overwrite_resources
    defaults = getattr(settings, "default_resources", None)
    return support.rule_settings(threads, resources, rule, defaults)


def first_round_rule(framework):
    return f"benchmark_{framework}"


def cell_job_threads(framework):
    """The threads of every job that runs one of the framework's cells: what set-threads
    gives the first run's rule (benchmark_<fw>), else CELL_THREADS. Snakemake applies
    set-threads by rule name, and a study's repeat rounds (benchmark_<fw>_r<k>) and the
    profiled runs (profile_<fw>) are rules of their own: they take the same, so that every
    run of a cell asks for the same cores. Where a cluster job is given fewer CPUs than
    these (Slurm's --cpus-per-gpu), the launcher caps the threads at them."""
    return profile_settings(first_round_rule(framework)).threads or CELL_THREADS


# Resources the benchmark and profile rules set themselves (multi_node_resources too).
OWN_RESOURCES = {"benchmark_slot", "gpu", "timeout_s", *support.MULTI_NODE_RESOURCES}


def cell_job_resources(framework):
    """set-resources of the first run's rule, for the other rules that run the framework's
    cells (see cell_job_threads): the same runtime, memory and cpus_per_gpu for each.
    Those the rules set themselves stay theirs; expressions are not carried."""
    resources = profile_settings(first_round_rule(framework)).resources
    return {name: v for name, v in resources.items() if name not in OWN_RESOURCES}


def job_threads(framework):
    """The threads a benchmark job of ``framework`` is given: the rule's (set-threads or
    CELL_THREADS), capped by --cores and --max-threads as Snakemake caps them."""
    threads = cell_job_threads(framework)
    settings = getattr(workflow, "resource_settings", None)
    caps = (getattr(settings, "cores", None), getattr(settings, "max_threads", None))
    for cap in caps:
        if cap:
            threads = min(threads, cap)
    return threads


def job_request(cell):
    """What a cell's cluster job asks of each node (CPUs, memory, partition) and which
    setting asks for each (support.job_request)."""
    framework = cell.params["framework"]
    name = first_round_rule(framework)
    return support.job_request(
        cell, name, job_threads(framework), profile_settings(name)
    )


def monitor_option():
    return MONITOR_OPTION


@job_function
def gpus_of(wildcards):
    return support.gpus_of(cell_of(wildcards))


@job_function
def gpus_per_node_of(wildcards):
    return support.gpus_per_node(cell_of(wildcards))


def per_node_gpu_resource():
    """gpus_per_node: the cell's GPUs on each of its nodes, for a submit command that asks
    per node (profiles/cluster-generic: --gpus-per-node). On cluster runs only: a local run
    does not use it, and each function of the job costs Snakemake time per job."""
    return {"gpus_per_node": gpus_per_node_of} if cluster_run() else {}


@functools.cache
def cluster_run():
    """Whether this run's jobs go to a cluster scheduler: the main process of a run whose
    executor is not local (a local run may give --jobs too). A cluster job's own Snakemake
    process, which parses this file again, is none. Through Snakemake's Python API, a run
    with a job count and no cores (workflow.nodes) counts as one."""
    if not workflow.is_main_process:
        return False
    local = support.executor_is_local(_command_line())
    if local is None:
        return workflow.nodes is not None
    return not local


def _refuse_multi_node_locally():
    """A cell of num_nodes > 1 needs a scheduler's allocation: refused, in one line, on a
    run without one (in the main process only: a cluster job parses this file again)."""
    if workflow.is_main_process and not cluster_run():
        try:
            support.check_single_node(CELLS)
        except support.WorkflowConfigError as exc:
            _config_error(exc)


_refuse_multi_node_locally()


def _refuse_what_slurm_would():
    """On a cluster run, a cell whose job no set of the Slurm cluster's nodes can hold (more
    GPUs, CPUs or memory on a node than any has, a partition it does not have, more time,
    nodes, CPUs or memory than its partitions allow) is refused in one line before any job
    is submitted: sbatch would refuse it, and Snakemake would end the run without its
    table, or the job would wait in the queue for ever. Only cells without a result are
    checked; where sinfo cannot tell, nothing is (dlbench.slurm_nodes).
    """
    if not (workflow.is_main_process and cluster_run()):
        return
    nodes = dlbench_slurm_nodes.read_nodes()
    if nodes:
        limits = dlbench_slurm_nodes.read_partition_limits()
        try:
            support.check_cluster_nodes(
                pending_cells().values(), nodes, job_request, limits
            )
        except support.WorkflowConfigError as exc:
            _config_error(exc)


def _cluster_resource(name):
    @job_function
    def resource(wildcards):
        return support.cluster_resource(cell_of(wildcards), name)

    return resource


def multi_node_resources():
    """The resources of a multi-node cell's job (support.cluster_resources), as functions of
    the job; none at all when no cell spans nodes, so that Snakemake evaluates nothing
    more per job in the usual study."""
    if not any(support.num_nodes(cell) > 1 for cell in CELLS):
        return {}
    return {name: _cluster_resource(name) for name in support.MULTI_NODE_RESOURCES}


# Datasets (prepared by workflow/rules/datasets.smk)


def dataset_source(name):
    return support.dataset_source(config, name)


def data_dir_of(cell):
    return support.data_dir(config, cell)


@job_function
def dataset_input_of(wildcards):
    return support.inputs(config, cell_of(wildcards))


def cell_inputs(framework):
    """The inputs of a framework's cell jobs (unpacked into the rule's input): a function of
    the job where some of its cells read files (datasets, op configs), else nothing at
    all, not even an empty named input, so that Snakemake evaluates nothing per job."""
    reads = any(
        support.inputs(config, cell)
        for cell in CELLS
        if cell.params.get("framework") == framework
    )
    return [dataset_input_of] if reads else []


def conversion_args(name, fmt):
    return support.conversion_args(config, name, fmt)


def conversion_command_args(name, fmt):
    """A conversion's options on its command line: conversion_args and the process count."""
    return support.conversion_args(config, name, fmt) + support.conversion_workers(
        config, name, fmt
    )


def synthetic_args(name):
    return support.synthetic_args(config, name)


def _prepare_cut_short_datasets_again():
    """A prepared dataset cut short (data.mdb shorter than its meta pages declare, a .rec
    ending before its last indexed record) kills its readers with SIGBUS, and Snakemake,
    seeing the folder, would never prepare it again: remove it before the DAG is built,
    and set aside the results of the cells reading it (Snakemake prepares a missing input
    only for a job that runs), so that it is prepared again and they rerun. Before the
    Slurm check and the progress ask for the cells without a result: these are some. One
    header read per prepared folder, not per cell; in the main process only (cluster jobs
    parse this file again), in a call that plans jobs."""
    if not workflow.is_main_process or _runs_no_jobs():
        return
    try:
        removed = dataset_quick.remove_broken_prepared(
            {data_dir_of(cell) for cell in CELLS}, dry_run=_dry_run
        )
    except DatasetError as exc:
        print(f"dlbench: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    paths = support.results_reading(config, CELLS, SYSTEM, REPEATS, removed)
    _run_again(paths, f"{len(paths)} cell(s) reading the removed dataset(s)")


_prepare_cut_short_datasets_again()


# Containers, conda environments and GPUs (workflow/rules/benchmark.smk)


def uses_deployment(method):
    return method in workflow.deployment_settings.deployment_method


def framework_conda_env(fw):
    """The framework's conda environment file, relative to this rules folder (None: none)."""
    return f"../../{fw.conda_env}" if fw.conda_env else None


def framework_container(framework):
    return support.framework_container(config, framework, REPOSITORY)


def in_container(framework):
    """True when the framework's cells run in its image (--use-apptainer and an image set)."""
    return uses_deployment(DeploymentMethod.APPTAINER) and bool(
        framework_container(framework)
    )


DLBENCH_SOURCES = REPOSITORY / "src"


def launcher_command(framework):
    """How a cell's job starts dlbench.launch (an argument list): with the image's python in
    a container, with the conda env's python under --use-conda (dlbench's sources on its
    path), otherwise with the interpreter running Snakemake."""
    if in_container(framework):
        return ["python"]
    if uses_deployment(DeploymentMethod.CONDA):
        return ["env", f"PYTHONPATH={DLBENCH_SOURCES}", "python"]
    return [support.this_python()]


def runner_python(framework):
    """The interpreter of the framework's runner, where the launcher runs it."""
    if in_container(framework) or uses_deployment(DeploymentMethod.CONDA):
        return "python"
    return framework_python(framework)


@functools.cache
def _image_digest(image):
    return (
        dlbench_launch.image_digest(image, Path(".snakemake/dlbench/image-digests"))
        or ""
    )


def container_image_of(framework):
    """The image the framework's cells run in, recorded with their results ('' on the host)."""
    return framework_container(framework) if in_container(framework) else ""


def framework_options(framework):
    """The launcher options every cell of a framework shares: its interpreter, its image and
    that image's digest. Computed once per rule (10,000-cell studies); the digest, which
    reads the image, only when a job of the framework runs."""
    image = container_image_of(framework)
    options = ["--python", runner_python(framework), f"--container_image={image}"]
    if not image:
        return [*options, "--container_digest=", *monitor_option()]
    return lambda wildcards: [
        *options,
        f"--container_digest={_image_digest(image)}",
        *monitor_option(),
    ]


@job_function
def cell_options(wildcards):
    """The launcher options of one cell: the cell itself and the dataset it reads."""
    cell = cell_of(wildcards)
    return ["--cell", cell.to_json(), f"--data_dir={data_dir_of(cell)}"]


def container_binds(args):
    """The folders to bind that ``args`` (the Apptainer arguments) do not bind already."""
    gpu = any(cell.params.get("device") == "gpu" for cell in CELLS)
    try:
        return support.container_binds(
            config,
            CELLS,
            Path.cwd(),
            dlbench_gpus.lock_dir() if gpu else None,
            bound=lambda path: support.bound_in_container(args, path),
        )
    except support.WorkflowConfigError as exc:
        _config_error(exc)


def _bind_into_containers():
    """Append --bind for container_binds() to the Apptainer arguments, once (a cluster job
    re-reads this file with the arguments its submitter already extended), and none for
    a folder the arguments already bind where it is (support.bound_in_container)."""
    settings = workflow.deployment_settings
    try:
        for path in container_binds(settings.apptainer_args or ""):
            option = f"--bind {shlex.quote(str(path))}"
            settings.apptainer_args = (
                f"{settings.apptainer_args or ''} {option}".strip()
            )
    except support.WorkflowConfigError as exc:
        _config_error(exc)


def _check_apptainer_args():
    """In the main process: a multi-node cell in an image is refused, and so are a missing
    local image and GPU cells in images started without --nv; arguments that start
    containers without the host's environment are named (one line each)."""
    if not workflow.is_main_process:
        return
    try:
        warning = support.clean_environment_warning(
            workflow.deployment_settings.apptainer_args or ""
        )
        if warning:
            print(f"dlbench config warning: {warning}", file=sys.stderr)
        support.check_multi_node_outside_containers(CELLS, in_container)
        if uses_deployment(DeploymentMethod.APPTAINER):
            for line in support.check_container_images(
                pending_cells().values(),
                workflow.deployment_settings.apptainer_args or "",
                container_image_of,
                Path.cwd(),
            ):
                print(f"dlbench config warning: {line}", file=sys.stderr)
    except support.WorkflowConfigError as exc:
        _config_error(exc)


def _declare_gpus():
    """Tell Snakemake how many GPUs the cells share, and the launcher how to pick them."""
    spec = config.get("gpus", {})
    if spec.get("lock_dir"):
        # Inherited by every job (also inside containers): where cells lock their GPU ids.
        os.environ[dlbench_gpus.LOCK_DIR_ENV] = str(Path(spec["lock_dir"]).absolute())
    if uses_deployment(DeploymentMethod.APPTAINER) and any(
        cell.params.get("device") == "gpu" for cell in CELLS
    ):
        try:
            # It must exist to be bound into containers.
            dlbench_gpus.prepare_lock_dir(dlbench_gpus.lock_dir())
        except dlbench_gpus.GpuAllocationError as exc:
            print(f"dlbench config error: gpus.lock_dir: {exc}", file=sys.stderr)
            raise SystemExit(1) from None
    if cluster_run():
        # Jobs go to a cluster scheduler, which gives each job its own GPUs.
        os.environ[dlbench_gpus.ALLOCATION_ENV] = "scheduler"
        return
    if "gpu" in workflow.global_resources:
        return  # given with --resources gpu=N
    total = spec.get("total")
    if total is None:
        total = len(dlbench_gpus.visible_gpus())
    if hasattr(workflow, "register_resource"):
        workflow.register_resource("gpu", total)
    else:  # Snakemake 8
        workflow.global_resources["gpu"] = total


_declare_gpus()
if uses_deployment(DeploymentMethod.APPTAINER):
    _check_apptainer_args()
    _bind_into_containers()


# Profiling (workflow/rules/profile.smk)

from dlbench.profiling import config as profiling_config


def _profile_jobs(cfg, cells):
    try:
        return profiling_config.select_jobs(cfg, cells, system=SYSTEM)
    except profiling_config.ProfilingConfigError as exc:
        print(f"dlbench config error: {exc}", file=sys.stderr)
        raise SystemExit(1) from None


def _adopt_profiles_of_one_system():
    """Profiles made before they were kept per system become this system's, as the results
    did (main process): their files move, none runs again."""
    if not workflow.is_main_process:
        return
    moves = profiling_config.adopt(SYSTEM)
    if moves:
        print(
            f"dlbench: adopted {len(moves)} profile folder(s) and log(s) as system "
            f"{SYSTEM!r} (first: {moves[0][1]})",
            file=sys.stderr,
        )


_adopt_profiles_of_one_system()


PROFILE_JOBS = _profile_jobs(config, CELLS)
# The frameworks the profile rules exist for: those of the cells profiled in this run.
PROFILED_FRAMEWORKS = [
    fw
    for fw in dlbench_frameworks.registry().values()
    if any(job.cell.params.get("framework") == fw.name for job in PROFILE_JOBS)
]


def profile_targets():
    return [job.target for job in PROFILE_JOBS]


# Progress (dlbench.progress): before the cells run, say which ones this CPU emulates; as
# they finish, print cells done and time left, and keep results/status.txt current.

from dlbench import progress as dlbench_progress

STATUS_FILE = Path("results/status.txt")


_refuse_what_slurm_would()
_say_lowered_timeouts()


def _record_plans():
    """What this run wants of each study its config names (its result files, its
    profiles), in results/<system>/<study>/plan.json: a run of another system leaves this
    system's stale files (a dropped cell, a repeat beyond ``repeats``) out of its table and
    report, as this run does (support.results_beside). Main process; not a dry run."""
    if not workflow.is_main_process or _runs_no_jobs() or _dry_run():
        return
    try:
        support.record_plans(
            SYSTEM, config.get("studies") or {}, CELL_RESULT_FILES, profile_targets()
        )
    except OSError as exc:  # the run goes on: only another system's table reads it
        print(f"dlbench: could not record this run's plan: {exc}", file=sys.stderr)


_record_plans()


def say_emulated(pending):
    emulated = dlbench_study.emulated_cells(pending)
    if not emulated:
        return
    info = dlbench_cpu.this_cpu()
    python = framework_python(emulated[0].params["framework"])
    slowdowns = dlbench_progress.probe_slowdowns(python, Path(".snakemake/dlbench"))
    words = f"{info.model}, {info.capability}" if info else "unknown CPU"
    for line in dlbench_progress.emulation_notices(emulated, slowdowns, words):
        print(line, file=sys.stderr)


def start_progress():
    """The progress watcher of this run (called by onstart, in the main process only)."""
    pending = pending_cells()
    say_emulated(list(pending.values()))
    planned = {
        path: dlbench_progress.Planned(cell.kind, dict(cell.params))
        for path, cell in pending.items()
    }
    watcher = dlbench_progress.Watcher(
        planned, STATUS_FILE, log_of=support.cell_log, also_watch=[AGGREGATE_LOG]
    )
    watcher.start()
    return watcher


PROGRESS = []
# The aggregate job's log: written during a run that failed, the table job ran (and failed).
AGGREGATE_LOG = Path("results/logs/aggregate.log")


onstart:
    # Snakemake copies an update() output (the Parquet, the report) into .snakemake/backups
    # before its job; a copy cut short by a full disk is never removed, and the next copy
    # of a folder then fails. No job has started yet, so a backup found now is stale.
    shutil.rmtree(".snakemake/backups", ignore_errors=True)
    PROGRESS.append(start_progress())


def say_failed_profiles():
    """A line at the run's end when some of its profiles failed (main process)."""
    if not workflow.is_main_process:
        return
    line = support.failed_profiles(profile_targets())
    if line:
        print(line, file=sys.stderr)


onsuccess:
    for watcher in PROGRESS:
        watcher.stop(succeeded=True)
    say_failed_profiles()


def write_what_there_is():
    """At the end of a failed run with cells lacking a result (a job refused or stopped by
    the scheduler, an interrupt), or stopped after its cells and before its table (a
    SIGTERM), the table and the report of the results there are, which
    Snakemake would not make: they wait for every cell (dlbench.incomplete_run). Only after
    a run that started jobs (onstart), in the main process."""
    if not (PROGRESS and workflow.is_main_process):
        return
    dlbench_incomplete_run.write(
        CELL_RESULT_FILES,
        results_beside_files() + results_beside_in_own_studies(),
        "results/benchmarks.parquet",
        "results/benchmarks.csv",
        "results/report",
        profiles_dir=profiling_config.PROFILES_DIR,
        profiles_kept=support.profiles_kept(
            SYSTEM, config.get("studies") or {}, profile_targets()
        ),
        baseline_system=config.get("baseline_system"),
        unstable_cv=UNSTABLE_CV,
        table_job_ran=PROGRESS[0].written_during_run(AGGREGATE_LOG),
    )


onerror:
    for watcher in PROGRESS:
        watcher.stop(succeeded=False)
    write_what_there_is()
    say_failed_profiles()
