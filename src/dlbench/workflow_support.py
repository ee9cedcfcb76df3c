"""The workflow's helpers: what ``workflow/rules/common.smk`` needs, as plain functions of
the config and the cells (testable without Snakemake). common.smk binds them to the
running workflow; what touches Snakemake itself stays there, one function each.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from dlbench import (
    cpu,
    frameworks,
    kinds,
    launch,
    multinode,
    result,
    run_to_run,
    slurm_nodes,
    stages,
    study,
    systems,
)
from dlbench.config_schema import WorkflowConfigError


def expand_cells(config: Mapping[str, Any]) -> list[study.Cell]:
    """Every cell of the config; a problem is one line naming the study and the field."""
    problem = cpu.override_problem()
    if problem:
        raise WorkflowConfigError(problem)
    try:
        return study.expand_config(config)
    except study.ConfigError as exc:
        raise WorkflowConfigError(str(exc)) from None


class RunSettings(NamedTuple):
    """A run's settings besides its cells, read from the config as the workflow and
    ``dlbench list`` read them (one place, so that list refuses what the workflow does)."""

    timeouts: dict[str, float]
    retry: tuple[str, ...]
    system: str
    repeats: dict[str, int]
    unstable_cv: float
    monitor_option: list[str]


def run_settings(config: Mapping[str, Any]) -> RunSettings:
    """The config's run settings; a problem is one line naming the field."""
    return RunSettings(timeouts=timeouts(config), retry=retry_statuses(config),
                       system=system_label(config), repeats=repeat_counts(config),
                       unstable_cv=unstable_cv(config), monitor_option=monitor_option(config))


def timeouts(config: Mapping[str, Any]) -> dict[str, float]:
    """Each study's timeout_s (dlbench.study.timeout_s), by study name."""
    return {name: study.timeout_s(name, spec, config)
            for name, spec in (config.get("studies") or {}).items()}


# Seconds a cluster job keeps after its launcher's time limit: to stop the cell's runner and
# record its failed row before the scheduler's own time limit ends the job.
JOB_END_MARGIN_S = 60
# The least time a job's runtime may leave a cell whose timeout_s it lowers: less leaves no
# time to start the framework, warm up and measure, and every cell would be a failed row
# (a result: the cell is not run again).
MIN_CELL_S = 120


def job_timeouts(timeouts: Mapping[str, float], runtime_min: float | None,
                 rule: str) -> tuple[dict[str, float], dict[str, str]]:
    """Each study's launcher time limit in jobs that run at most ``runtime_min`` minutes
    (``rule``'s runtime on a cluster; None: no limit): its timeout_s, or the job's time
    less JOB_END_MARGIN_S where that is shorter. A cell the scheduler stops at its time
    limit leaves no result (it would run again on every run); one its launcher stops is a
    failed row. Also a line for each study whose limit was lowered; a runtime that leaves
    such a study's cells less than MIN_CELL_S is a WorkflowConfigError."""
    if not runtime_min or runtime_min <= 0:
        return dict(timeouts), {}
    cap = runtime_min * 60 - JOB_END_MARGIN_S
    lowered = sorted(name for name, value in timeouts.items() if value > cap)
    if lowered and cap < MIN_CELL_S:
        least = math.ceil((MIN_CELL_S + JOB_END_MARGIN_S) / 60)
        raise WorkflowConfigError(
            f"study '{lowered[0]}': {rule} runtime: {runtime_min:g} minutes leaves its cells "
            f"{max(cap, 0):g} s (the job's time less {JOB_END_MARGIN_S} s to record a failed "
            f"row), less than the {MIN_CELL_S} s a cell needs (" + slurm_nodes.change_hint(
                f"raise it to {least} minutes or more", "set-resources") + ")")
    longer = slurm_nodes.change_hint(f"to give them longer, raise {rule}'s runtime",
                                     "set-resources")
    lines = {name: (f"study '{name}': timeout_s {timeouts[name]:g} s is longer than its "
                    f"cluster jobs may run ({rule} runtime: {runtime_min:g} minutes): its "
                    f"cells are stopped after {cap:g} s ({longer})")
             for name in lowered}
    return {name: min(value, cap) for name, value in timeouts.items()}, lines


RETRY_STATUSES = ("failed", "oom", "skipped")


def retry_statuses(config: Mapping[str, Any]) -> tuple[str, ...]:
    """Which recorded outcomes to run again (config retry_failed: true means failed; a list,
    or on the command line a comma-separated string, names statuses)."""
    value = config.get("retry_failed", False)
    if type(value) is int and value in (0, 1):  # --config retry_failed=1: YAML's integer
        value = bool(value)
    if isinstance(value, str):  # from the command line: --config retry_failed=true
        words = value.strip().lower()
        value = (True if words in ("true", "yes", "1") else
                 False if words in ("false", "no", "0", "") else words.split(","))
    if value is True:
        return ("failed",)
    if value is False or value is None:
        return ()
    values = [v.strip() if isinstance(v, str) else v
              for v in (value if isinstance(value, list) else [value])]
    bad = [v for v in values if v not in RETRY_STATUSES]
    if bad:
        raise WorkflowConfigError(f"config: retry_failed: unknown status {bad[0]!r} (valid: "
                                  f"true, false, or a list of {', '.join(RETRY_STATUSES)})")
    return tuple(values)


def unstable_cv(config: Mapping[str, Any]) -> float:
    """The run-to-run CV above which a cell is flagged unstable (dlbench.run_to_run)."""
    try:
        return run_to_run.check_threshold(
            config.get("unstable_cv", run_to_run.DEFAULT_UNSTABLE_CV))
    except ValueError as exc:
        raise WorkflowConfigError(f"config: {exc}") from None


def system_label(config: Mapping[str, Any]) -> str:
    """The system this run's results belong to (dlbench.systems), or one line why not."""
    try:
        return systems.label_of(config)
    except systems.SystemLabelError as exc:
        raise WorkflowConfigError(str(exc)) from None


def results_to_retry(cells: Iterable[study.Cell], statuses: Iterable[str],
                     system: str, repeats: Mapping[str, int] | None = None) -> list[Path]:
    """The result files of these cells (every repeat) whose recorded status is one of
    ``statuses``."""
    wanted = set(statuses)
    if not wanted:
        return []
    # A missing result runs anyway; an unreadable one is set aside by the aggregate.
    return [path for path in result_paths(cells, system, repeats or {})
            if recorded_status(path) in wanted]


def failed_on_changed_inputs(config: Mapping[str, Any], cells: Iterable[study.Cell],
                             system: str, repeats: Mapping[str, int] | None = None
                             ) -> list[Path]:
    """The failed results of cells that read a folder (a user's ImageFolder tree) in which
    something changed after the result was written: an image mended in place leaves the
    folder's own mtime, all Snakemake compares, as it was. Each folder is walked once, and
    only when a failed cell reads it (dlbench.datasets.fingerprint.last_change_ns)."""
    from dlbench.datasets import fingerprint

    is_folder: dict[str, bool] = {}
    changed: dict[str, int | None] = {}
    out = []
    for path, cell in result_paths(cells, system, repeats or {}).items():
        folders = [name for name in inputs(config, cell)
                   if is_folder.setdefault(name, Path(name).is_dir())]
        # Only the results of such cells are read: most cells read no folder.
        if not folders or recorded_status(path) != "failed":
            continue
        try:
            written = path.stat().st_mtime_ns
        except OSError:  # moved aside meanwhile: the cell runs anyway
            continue
        for folder in folders:
            if folder not in changed:
                changed[folder] = fingerprint.last_change_ns(folder)
            if changed[folder] is not None and changed[folder] > written:
                out.append(path)
                break
    return out


def results_reading(config: Mapping[str, Any], cells: Iterable[study.Cell], system: str,
                    repeats: Mapping[str, int], folders: Iterable[str | os.PathLike[str]]
                    ) -> list[Path]:
    """The result files there are of the cells whose prepared dataset is one of
    ``folders`` (every repeat): a dataset removed to be prepared again (cut short) is
    prepared only for a cell that runs, so these must run again."""
    gone = {os.path.normpath(folder) for folder in folders}
    if not gone:
        return []
    return [path for path, cell in result_paths(cells, system, repeats).items()
            if os.path.normpath(data_dir(config, cell) or ".") in gone and path.exists()]


UNREADABLE = "unreadable"


def recorded(path: Path) -> tuple[str | None, float | None]:
    """The status a result file records and the seconds its cell's process took (its
    stages, start-up included, else its wall time): (None, None) without a file,
    UNREADABLE for one the aggregate would set aside: not JSON, another schema version, a
    status the schema has not, or another cell's (the aggregate's cheap checks; the whole
    schema is checked there)."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError):
        return UNREADABLE, None
    if (not isinstance(data, dict) or data.get("schema_version") != result.SCHEMA_VERSION
            or data.get("status") not in result.STATUSES
            or data.get("cell_id") != systems.cell_id_of(path)
            or data.get("study") != path.parent.parent.name):
        return UNREADABLE, None
    return data["status"], stages.total_s(data)


def recorded_status(path: Path) -> str | None:
    """The status a result file records: None without a file, UNREADABLE for one the
    aggregate would set aside."""
    return recorded(path)[0]


def result_path(cell: study.Cell, system: str, repeat: int = 0) -> Path:
    return systems.result_path(system, cell.study, cell.id, repeat=repeat)


def cell_log(result_file: Path) -> Path:
    """The job log of a result file's cell, as the benchmark rule names it:
    results/<system>/<study>/logs/<cell>[_rK].log beside its cells/ folder."""
    result_file = Path(result_file)
    return result_file.parent.parent / "logs" / f"{result_file.stem}.log"


def set_aside_run(result_file: Path, folder: str = "retried") -> Path:
    """Move a cell's result into ``folder``/ beside it and its job log into logs/``folder``/
    under the same stamp, so that the cell runs again and nothing of its earlier run is
    lost (its next job would write over the log); where the result went."""
    from dlbench import atomic

    result_file = Path(result_file)
    moved = atomic.set_aside(result_file, folder)
    log = cell_log(result_file)
    if log.is_file():
        stamp = moved.name[len(result_file.stem) + 1:len(moved.name) - len(moved.suffix)]
        atomic.set_aside(log, folder, stamp=stamp)
    return moved


def repeat_counts(config: Mapping[str, Any]) -> dict[str, int]:
    """Each study's repeats (dlbench.study.repeats), by study name."""
    return {name: study.repeats(name, spec, config)
            for name, spec in (config.get("studies") or {}).items()}


def result_paths(cells: Iterable[study.Cell], system: str,
                 repeats: Mapping[str, int]) -> dict[Path, study.Cell]:
    """Every result a run wants, by path: each cell once per repeat of its study, round
    by round (every cell's first run, then every cell's second, ...)."""
    cells = list(cells)
    rounds = max((repeats.get(cell.study, 1) for cell in cells), default=1)
    # One folder per study, joined once (Path joins cost seconds in 10,000-cell studies).
    folders = {name: result_path(cell, system).parent
               for name, cell in {cell.study: cell for cell in cells}.items()}
    return {folders[cell.study] / systems.result_name(cell.id, k): cell
            for k in range(rounds) for cell in cells if k < repeats.get(cell.study, 1)}


def results_beside(system: str, studies: Iterable[str], planned: Collection[str] = (),
                   say: Callable[[str], None] | None = None) -> list[Path]:
    """Result files under results/ that this run does not want but the table keeps: the
    results of the other systems (trees copied in from other machines, or made there on a
    shared filesystem), and this system's results that this run does not plan (``planned``,
    its result files) of studies other than ``studies``, those its config names (a run of
    another config measured them). A study the run's cells imply (the calibration study)
    keeps the cells another config planned there. Of a named study the table holds the
    cells and repeats it now has (a changed grid's old cells are left out), and of any
    other study those its last run planned (``record_plans``), where it says. ``say``
    takes a line about a plan that cannot be read (all that study's results are kept)."""
    named, wanted = set(studies), set(planned)
    plans = systems.Plans(say)
    return [p for p in systems.result_files()
            if (systems.system_of(p) != system
                or (systems.study_of(p) not in named and str(p) not in wanted))
            and plans.keeps(p)]


def record_plans(system: str, studies: Iterable[str], planned: Iterable[str],
                 profiles: Iterable[str]) -> list[Path]:
    """Record, for each study the config names, what this run wants of it: its result
    files (``planned``) and profile folders (``profiles``, their manifests). A run that
    does not plan the study reads it to leave out its stale results (``results_beside``)
    and profiles (``profiles_kept``). The plan files written (those that changed)."""
    wanted: dict[str, tuple[set[str], set[str]]] = {name: (set(), set()) for name in studies}
    for path in map(Path, planned):
        study_name = systems.study_of(path)
        if systems.system_of(path) == system and study_name in wanted:
            wanted[study_name][0].add(path.name)
    for manifest in map(Path, profiles):  # results/profiles/<system>/<tool>/<study>/<cell>/…
        owner, tool, study_name, cell = manifest.parent.parts[-4:]
        if owner == system and study_name in wanted:
            wanted[study_name][1].add(f"{tool}/{cell}")
    written = []
    for name, (results, profiled) in sorted(wanted.items()):
        path = systems.plan_path(system, name)
        if systems.write_plan(path, systems.Plan(frozenset(results), frozenset(profiled))):
            written.append(path)
    return written


def profiles_kept(system: str, studies: Iterable[str], planned: Collection[str],
                  say: Callable[[str], None] | None = None) -> Callable[[Path], bool]:
    """Which profile folders (``results/profiles/<system>/<tool>/<study>/<cell>``) the
    report shows, as ``results_beside`` chooses results: this system's of studies other
    than ``studies`` (those the config names) whole, and of those studies the run's
    profiles only (``planned``, their manifests): a tool or cell the config no longer
    profiles leaves the report (its folder stays). Of the others, those the study's last
    run planned, where it says."""
    named = set(studies)
    wanted = {os.path.normpath(Path(path).parent) for path in planned}
    plans = systems.Plans(say)

    def kept(directory: Path) -> bool:
        owner, tool, study_name, cell = directory.parts[-4:]
        if owner == system and study_name in named:
            return os.path.normpath(directory) in wanted
        return plans.keeps_profile(owner, tool, study_name, cell)
    return kept


def pending(cells: Iterable[study.Cell], system: str,
            repeats: Mapping[str, int] | None = None) -> dict[Path, study.Cell]:
    """Cells (and repeats) without a result yet, by result path: what a run will measure."""
    paths = result_paths(cells, system, repeats or {})
    return {path: cell for path, cell in paths.items() if not path.exists()}


def framework_settings(config: Mapping[str, Any], framework: str) -> Mapping[str, Any]:
    return (config.get("frameworks") or {}).get(framework) or {}


def this_python(executable: str | None = None) -> str:
    """The interpreter running Snakemake, by one name whatever name started it: it is in
    every job's params, and a changed params value measures the cell again, so .venv/bin/
    python3 and .venv/bin/python (one file) must not differ. Not the link resolved: that
    is the base interpreter, outside the virtual environment."""
    path = Path(executable or sys.executable)
    # python3 first: what the entry points pip writes (.venv/bin/snakemake) run under
    for name in ("python3", "python", f"python3.{sys.version_info.minor}"):
        candidate = path.with_name(name)
        try:
            if candidate.exists() and os.path.samefile(candidate, path):
                return str(candidate)
        except OSError:
            continue
    return str(path)


def framework_python(config: Mapping[str, Any], framework: str,
                     repository: Path | None = None) -> str:
    """The interpreter of a framework's environment (DLBS's host_python_path): the config's,
    else the framework's own (``Framework.python``, in ``repository``); empty: the one
    running Snakemake."""
    return _setting(config, framework, "python", repository) or this_python()


def framework_container(config: Mapping[str, Any], framework: str,
                        repository: Path | None = None) -> str | None:
    """The framework's image (.sif path, docker:// or oras:// URI): the config's, else the
    framework's own (``Framework.container``, in ``repository``); None: none (given
    empty)."""
    return _setting(config, framework, "container", repository) or None


def _setting(config: Mapping[str, Any], framework: str, key: str,
             repository: Path | None) -> str:
    """A framework's setting: the config's as written (a relative path is the run's
    folder's), else the framework's own, a path in the ``repository`` (the workflow's,
    where `make` builds environments and images): as written from the repository (the job
    parameters `make run` has always had), named in full from another folder
    (--directory)."""
    given = framework_settings(config, framework).get(key)
    if given is not None:
        return given
    known = frameworks.registry().get(framework)
    own = getattr(known, key) if known else ""
    if own and repository is not None and "://" not in own and not Path(own).is_absolute() \
            and Path.cwd().resolve() != repository.resolve():
        return str(repository / own)
    return own


def monitor_option(config: Mapping[str, Any]) -> list[str]:
    """The launcher's monitor option from 'monitor.interval_ms': none at the default, given
    or not, since the option is part of each cell job's params, and a job whose params
    change runs again (writing the default out must not measure every cell again)."""
    from dlbench.monitor import DEFAULT_INTERVAL_MS

    interval = (config.get("monitor") or {}).get("interval_ms")
    if interval is not None and not math.isfinite(interval):  # the schema lets .nan pass
        raise WorkflowConfigError(f"monitor.interval_ms: must be a finite number >= 0, "
                                  f"got {interval!r}")
    if interval is None or interval == DEFAULT_INTERVAL_MS:
        return []
    return [f"--monitor_interval_ms={interval}"]


def num_nodes(cell: study.Cell) -> int:
    return cell.params.get("num_nodes") or 1


def gpus_per_node(cell: study.Cell) -> int:
    """The GPUs a cell's job holds on each of its nodes (num_gpus; 0 for a CPU cell)."""
    return launch.gpus_needed({"params": cell.params})


def gpus_of(cell: study.Cell) -> int:
    """The GPUs a cell's job holds in all: num_gpus on each of its nodes."""
    return gpus_per_node(cell) * num_nodes(cell)


def check_single_node(cells: Iterable[study.Cell]) -> None:
    """A run without a cluster scheduler cannot give a cell several nodes: refuse it before
    any job runs (one line naming the study)."""
    for cell in cells:
        nodes = num_nodes(cell)
        if nodes > 1:
            raise WorkflowConfigError(f"study '{cell.study}': num_nodes: {nodes} nodes need a "
                                      f"cluster scheduler; {multinode.CLUSTER_HINT}")


def plain_setting(value: Any) -> int | float | str | None:
    """A value of set-threads or set-resources as a plain number or text (Snakemake holds
    them as Resource objects); None for none, or for an expression evaluated per job."""
    try:
        value = getattr(value, "value", value)
    except ValueError:  # Snakemake's Resource: "must be evaluated within ... a rule"
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    return value


# A partition setting as written: a name, a list of names, either in quotes or not.
_PARTITIONS = re.compile(r"""^(['"]?)([\w.-]+(?:,[\w.-]+)*)\1$""")


def partition_setting(value: Any) -> tuple[str, ...]:
    """The partitions a slurm_partition setting names (the Slurm executor's -p, a comma
    list allowed); none where unset or an expression. Snakemake holds text resources as
    expressions to evaluate per job (a bare name falls back to itself): what is written is
    read here, never evaluated."""
    text = getattr(value, "raw", None)
    if not isinstance(text, str):
        text = plain_setting(value)
    match = _PARTITIONS.match(text.strip()) if isinstance(text, str) else None
    return tuple(match.group(2).split(",")) if match else ()


@dataclass(frozen=True)
class RuleSettings:
    """What set-threads and set-resources (a profile's, or the command line's) give a rule,
    and the run's default-resources (``defaults``, plain values); ``partitions``: the
    rule's slurm_partition, else the default one (``partition_from`` says which)."""

    threads: int | None = None
    resources: Mapping[str, int | float | str] = field(default_factory=dict)
    defaults: Mapping[str, int | float | str] = field(default_factory=dict)
    partitions: tuple[str, ...] = ()
    partition_from: str = ""

    def setting(self, name: str, rule: str) -> tuple[int | float | str | None, str]:
        """A resource as ``rule``'s job gets it (set-resources, else default-resources),
        and where it comes from (the rule's name, or "default-resources")."""
        if name in self.resources:
            return self.resources[name], rule
        return self.defaults.get(name), "default-resources"


def _plain_resources(resources: Any) -> dict[str, int | float | str]:
    return {name: plain for name, value in (resources or {}).items()
            if (plain := plain_setting(value)) is not None}


def rule_settings(overwrite_threads: Mapping[str, Any], overwrite_resources: Mapping[str, Any],
                  rule: str, default_resources: Mapping[str, Any] | None = None
                  ) -> RuleSettings:
    threads = plain_setting(overwrite_threads.get(rule))
    own = overwrite_resources.get(rule) or {}
    partitions, partition_from = partition_setting(own.get("slurm_partition")), rule
    if not partitions:
        partitions = partition_setting((default_resources or {}).get("slurm_partition"))
        partition_from = "default-resources"
    return RuleSettings(threads if isinstance(threads, int) else None, _plain_resources(own),
                        _plain_resources(default_resources), partitions,
                        f"{partition_from} slurm_partition" if partitions else "")


def job_cpus(cell: study.Cell, rule: str, threads: int,
             settings: RuleSettings) -> tuple[int, str]:
    """The CPUs a cell's job asks on each node, and the setting that asks for them: for a
    GPU cell, cpus_per_gpu x its GPUs on a node where set-resources or default-resources
    give cpus_per_gpu (the Slurm executor's --cpus-per-gpu), else the job's threads
    (--cpus-per-task)."""
    gpus = gpus_per_node(cell)
    per_gpu, where = settings.setting("cpus_per_gpu", rule)
    if gpus and isinstance(per_gpu, int) and per_gpu > 0:
        return gpus * per_gpu, f"{where} cpus_per_gpu: {per_gpu} x {gpus} GPU(s)"
    return threads, f"{rule} threads: {threads}"


def job_memory(rule: str, cpus: int, settings: RuleSettings) -> tuple[int, str]:
    """The memory (MB) a cell's job asks on each node, and the setting that asks for it:
    mem_mb_per_cpu x its CPUs where given (the Slurm executor's --mem-per-cpu, which it
    prefers), else mem_mb (--mem); (0, '') where neither is a number."""
    per_cpu, where = settings.setting("mem_mb_per_cpu", rule)
    if isinstance(per_cpu, int | float) and per_cpu > 0 and cpus:
        return int(per_cpu * cpus), f"{where} mem_mb_per_cpu: {per_cpu:g} x {cpus} CPUs"
    mem, where = settings.setting("mem_mb", rule)
    if isinstance(mem, int | float) and mem > 0:
        return int(mem), f"{where} mem_mb: {mem:g}"
    return 0, ""


def job_request(cell: study.Cell, rule: str, threads: int,
                settings: RuleSettings) -> slurm_nodes.Request:
    """What a cell's cluster job asks of each of its nodes, run by ``rule`` with
    ``threads`` and the profile's ``settings``."""
    cpus, cpus_from = job_cpus(cell, rule, threads, settings)
    mem_mb, mem_from = job_memory(rule, cpus, settings)
    minutes, where = settings.setting("runtime", rule)  # minutes, as Snakemake holds it
    minutes = int(minutes) if isinstance(minutes, int | float) and minutes > 0 else 0
    minutes_from = f"{where} runtime" if minutes else ""
    return slurm_nodes.Request(
        cell.study, num_nodes(cell), gpus_per_node(cell), cpus, cpus_from, mem_mb, mem_from,
        settings.partitions, settings.partition_from, minutes, minutes_from)


def check_cluster_nodes(cells: Iterable[study.Cell], nodes: Sequence[slurm_nodes.Node],
                        request_of: Callable[[study.Cell], slurm_nodes.Request] | None = None,
                        limits: Mapping[str, slurm_nodes.Limits] | None = None) -> None:
    """Refuse, in one line naming the study, a cell whose job no set of the cluster's nodes
    can hold, or no partition's ``limits`` allow (``nodes``: what sinfo says; ``limits``:
    what scontrol says, dlbench.slurm_nodes); ``request_of`` gives what a cell's job asks
    (job_request), else only its nodes and GPUs are checked."""
    requests = [request_of(cell) if request_of else
                slurm_nodes.Request(cell.study, num_nodes(cell), gpus_per_node(cell))
                for cell in cells]
    why = slurm_nodes.refusal(slurm_nodes.distinct(requests), nodes, limits)
    if why:
        raise WorkflowConfigError(why)


# The resources cluster_resources may give a job (each a function of the job in the rules).
MULTI_NODE_RESOURCES = ("nodes", "tasks", "mpi", "tasks_per_gpu", "gres")


def cluster_resources(cell: study.Cell) -> dict[str, Any]:
    """What a multi-node cell's cluster job asks for beyond one node (none for the others).

    In the terms of snakemake-executor-plugin-slurm: ``nodes`` nodes with one task each
    (``tasks``; ``mpi`` tells the plugin that the job starts its tasks itself, with srun,
    instead of running the job's command in one task; ``tasks_per_gpu`` 0 keeps it from
    turning ``tasks`` into --ntasks-per-gpu), and ``gres`` num_gpus GPUs on each node (the
    ``gpu`` resource, --gpus, is the job's total)."""
    nodes = num_nodes(cell)
    if nodes == 1:
        return {}
    out: dict[str, Any] = {"nodes": nodes, "tasks": nodes, "mpi": "srun", "tasks_per_gpu": 0}
    per_node = launch.gpus_needed({"params": cell.params})
    if per_node:
        out["gres"] = f"gpu:{per_node}"
    return out


def cluster_resource(cell: study.Cell, name: str) -> Any:
    """One of MULTI_NODE_RESOURCES for a cell's job, None where the job has none. ``nodes``
    is the cell's num_nodes, 1 included: the rule's function replaces the profile's
    default-resources ``nodes: 1``, and Snakemake drops a resource whose function gives
    None, so a one-node cell's job would have no nodes at all (cluster-generic's
    ``--nodes={resources.nodes}`` could not be formatted)."""
    if name == "nodes":
        return num_nodes(cell)
    return cluster_resources(cell).get(name)


# Snakemake's options that make a call do one thing other than plan and run jobs: lint,
# list, draw the DAG, unlock, clean up metadata or environments, summarise, archive,
# delete outputs, build a report (snakemake.cli.args_to_api's branches before execution).
NO_JOB_OPTIONS = (
    "lint", "list_target_rules", "list_rules", "print_compilation", "generate_unit_tests",
    "dag", "rulegraph", "filegraph", "d3dag", "unlock", "cleanup_metadata",
    "conda_cleanup_envs", "conda_create_envs_only", "list_conda_envs", "cleanup_shadow",
    "container_cleanup_images", "list_changes", "list_input_changes", "list_params_changes",
    "list_untracked", "summary", "detailed_summary", "archive", "delete_all_output",
    "delete_temp_output")


def plans_no_jobs(args: Any) -> bool:
    """Whether Snakemake's parsed command line (``args``) is a call that neither runs nor
    plans jobs (--unlock, --list-rules, --cleanup-metadata, --summary, ...): the
    workflow's own start-up then sets no result aside and removes no dataset, nor says it
    would (a dry run says it). False where unknown (no command line: the Python API)."""
    if args is None:
        return False
    if getattr(args, "containerize", None) is not None:
        return True
    if getattr(args, "report", None) and not getattr(args, "report_after_run", False):
        return True
    return any(getattr(args, name, None) for name in NO_JOB_OPTIONS)


def snakemake_locked(locks: Path) -> bool:
    """Whether Snakemake's lock folder holds a lock: another run of this folder is on (or
    one that crashed left it, which Snakemake refuses alike until --unlock)."""
    try:
        return any(entry.is_file() for entry in locks.iterdir())
    except OSError:
        return False


def executor_is_local(args: Any) -> bool | None:
    """Whether the executor of Snakemake's parsed command line (``args``, profiles
    included) runs the jobs on this machine: its plugin's ``local_exec``, as Snakemake
    decides (no ``--executor``: local, or dryrun/touch). None where unknown (no command
    line, an executor plugin that cannot be loaded)."""
    if args is None:
        return None
    name = getattr(args, "executor", None)
    if name in (None, "local", "dryrun", "touch"):
        return True
    try:
        from snakemake_interface_executor_plugins.registry import ExecutorPluginRegistry

        return bool(ExecutorPluginRegistry().get_plugin(name).common_settings.local_exec)
    except Exception:  # noqa: BLE001 (Snakemake says what is wrong with its plugin)
        return None


def check_multi_node_outside_containers(cells: Iterable[study.Cell],
                                        in_container: Callable[[str], bool]) -> None:
    """Refuse, in one line naming the study, a multi-node cell whose framework runs in a
    container image (``in_container``: --use-apptainer and an image set). Its runner
    starts each node's task with srun, and Slurm starts those tasks on the hosts, outside
    the image, with the image's interpreter path: they would fail or run other software."""
    for cell in cells:
        nodes, framework = num_nodes(cell), cell.params.get("framework", "")
        if nodes > 1 and in_container(framework):
            raise WorkflowConfigError(
                f"study '{cell.study}': num_nodes: {nodes} nodes cannot run in a container "
                f"image (--use-apptainer with frameworks.{framework}.container): srun starts "
                "each node's task on the host, outside the image; run the study without "
                "--use-apptainer")


# Apptainer options that give a container the host's GPUs (NVIDIA's, and AMD's).
GPU_OPTIONS = ("--nv", "--nvccli", "--rocm")


def check_container_images(cells: Iterable[study.Cell], args: str,
                           image_of: Callable[[str], str], workdir: Path) -> list[str]:
    """Refuse, in one line, what would fail every pending cell of a framework that runs in
    an image (``image_of``: its image, '' on the host): a local image that is not there
    (Apptainer would fail each cell's job with its own error block), and GPU cells whose
    containers ``args`` would start without the host's GPUs (no --nv: each would record
    a failed row, not measured again until retry_failed). Returns a warning per framework
    given no image (its cells run on the host under --use-apptainer) and per registry
    image named by a tag, not a digest: its results record the URI, which stays the same
    when the image behind the tag is rebuilt (and Snakemake keeps the copy it pulled)."""
    given = {word.partition("=")[0] for word in _apptainer_words(args)}
    seen: set[str] = set()
    warnings = []
    for cell in cells:
        framework = cell.params.get("framework", "")
        image = image_of(framework)
        if not image:  # frameworks.<name>.container given empty
            if framework not in seen:
                seen.add(framework)
                warnings.append(f"frameworks.{framework}.container: none given: its cells "
                                "run on the host, not in a container")
            continue
        if framework not in seen:
            seen.add(framework)
            if "://" not in image and not (workdir / image).exists():
                raise WorkflowConfigError(
                    f"frameworks.{framework}.container: {image}: no such image (relative to "
                    f"{workdir})")
            if "://" in image and "@sha256:" not in image:
                warnings.append(
                    f"frameworks.{framework}.container: {image} names a tag, not a digest: "
                    "its results record the URI alone, which a rebuilt image under the tag "
                    "keeps; pin it (...@sha256:<digest>) to tell images apart")
        if cell.params.get("device") == "gpu" and not given & set(GPU_OPTIONS):
            raise WorkflowConfigError(
                f"apptainer-args: no --nv (nor --nvccli, --rocm): the GPU cells of study "
                f"'{cell.study}' would see no GPU in framework '{framework}''s image; add "
                "--nv (the workflow profile's apptainer-args have it, a command line's "
                "replace them)")
    return warnings


def _apptainer_words(args: str) -> list[str]:
    import shlex

    try:
        return shlex.split(args or "")
    except ValueError as exc:
        raise WorkflowConfigError(f"apptainer-args: {exc}: {args!r}") from None


def apptainer_binds(args: str) -> list[tuple[str, str]]:
    """The (source, destination) pairs Apptainer arguments bind: --bind or -B followed by
    its value or joined to it (--bind=V, -B=V, -BV), each value a comma list of
    src[:dst[:options]] (dst: src where not given)."""
    words, values = _apptainer_words(args), []
    for i, word in enumerate(words):
        if word in ("--bind", "-B"):
            values += words[i + 1:i + 2]
        elif word.startswith("--bind="):
            values.append(word[len("--bind="):])
        elif word.startswith("-B"):
            values.append(word[2:].removeprefix("="))
    pairs = []
    for spec in (s for value in values for s in value.split(",") if s):
        src, _, rest = spec.partition(":")
        pairs.append((src, rest.partition(":")[0] or src))
    return pairs


def bound_in_container(args: str, path: Path) -> bool:
    """Whether Apptainer ``args`` already show ``path`` inside the container where it is on
    the host: it, or a folder above it, bound to the same path."""
    for src, dst in apptainer_binds(args):
        if Path(src) == Path(dst) and (Path(src) == path or Path(src) in path.parents):
            return True
    return False


# Apptainer options that start a container without the host's environment (--containall
# implies --cleanenv).
CLEAN_ENVIRONMENT = ("--cleanenv", "-e", "--containall", "-C")
# What a cell reads from its environment: the GPUs its job was given (or the scheduler's
# word that they were), the GPU lock folder, and its Slurm job (multi-node cells).
CELL_ENVIRONMENT = ("CUDA_VISIBLE_DEVICES", "DLBENCH_GPU_ALLOCATION", "DLBENCH_GPU_LOCK_DIR",
                    "SLURM_JOB_ID")


def clean_environment_warning(args: str) -> str | None:
    """A line saying what a cell loses where Apptainer ``args`` clear the environment
    (--cleanenv, -e, --containall, -C); None where they do not."""
    options = [w for w in _apptainer_words(args) if w.partition("=")[0] in CLEAN_ENVIRONMENT
               and w.partition("=")[2].lower() not in ("false", "0")]
    if not options:
        return None
    return (f"apptainer-args: {options[0]} starts each cell's container without "
            f"{', '.join(CELL_ENVIRONMENT)}: a GPU cell may then use GPUs its job was not "
            f"given; leave {options[0]} out")


def datasets(config: Mapping[str, Any]) -> Mapping[str, Any]:
    return config.get("datasets") or {}


def data_dir(config: Mapping[str, Any], cell: study.Cell) -> str:
    """The prepared dataset a cell's runner reads, in its framework's storage format."""
    return kinds.get(cell.kind).data_dir(cell.params, datasets(config))


def inputs(config: Mapping[str, Any], cell: study.Cell) -> list[str]:
    """What a cell reads (its kind says): a change to one of them reruns it."""
    return kinds.get(cell.kind).inputs(cell.params, datasets(config))


def dataset_source(config: Mapping[str, Any], name: str) -> str:
    """The ImageFolder a dataset is made from: the user's tree, or the synthetic one."""
    return datasets(config)[name].get("path") or f"results/datasets/{name}/image_folder"


def _conversion_options(config: Mapping[str, Any], name: str, fmt: str) -> dict[str, Any]:
    spec = datasets(config)[name]
    return {**spec.get("convert", {}), **spec.get(fmt, {})}


def conversion_args(config: Mapping[str, Any], name: str, fmt: str) -> list[str]:
    """Command-line options of a conversion that shape the records, from the dataset's config
    (an argument list): the rule's params, a change of which prepares the dataset again."""
    opts = _conversion_options(config, name, fmt)
    args = []
    for key in ("resize", "quality", "seed", "subset"):
        if opts.get(key) is not None:
            args += [f"--{key}", str(opts[key])]
    # encoded is the LMDB writer's alone: ``convert:`` (both formats) may set it, and the
    # recordio command would refuse it before --record-failure could record anything.
    flags = ("center_crop", "shuffle", "encoded") if fmt == "lmdb" else ("center_crop", "shuffle")
    for key in flags:
        if opts.get(key):
            args.append(f"--{key.replace('_', '-')}")
    return args


def conversion_workers(config: Mapping[str, Any], name: str, fmt: str) -> list[str]:
    """A conversion's process count (``--workers N``; none: the writer's default). Apart
    from conversion_args: records come back in list order whatever the count
    (encode_jobs.ordered_map), so a new count must not prepare the dataset again."""
    workers = _conversion_options(config, name, fmt).get("workers")
    return [] if workers is None else ["--workers", str(workers)]


def synthetic_args(config: Mapping[str, Any], name: str) -> list[str]:
    spec = datasets(config)[name]["synthetic"]
    args = []
    for key in ("classes", "images_per_class", "image_size", "seed"):
        args += [f"--{key.replace('_', '-')}", str(spec[key])]
    return args


def container_binds(config: Mapping[str, Any], cells: Iterable[study.Cell], here: Path,
                    gpu_lock_dir: Path | None,
                    bound: Callable[[Path], bool] = lambda path: False) -> list[Path]:
    """Host folders that containerised cells read and Snakemake does not bind (it binds
    the working directory ``here``) nor the user's arguments do (``bound``): datasets and
    op configs elsewhere, and the GPU lock folder when a cell uses GPUs."""
    wanted: list[tuple[Path, str]] = []
    for cell in cells:
        for path in inputs(config, cell):
            wanted.append((Path(path) if Path(path).is_dir() else Path(path).parent,
                           f"study '{cell.study}' reads {path}"))
    if gpu_lock_dir is not None:
        wanted.append((gpu_lock_dir, "gpus.lock_dir"))
    binds = []
    for path, what in wanted:
        path = path.absolute()  # not resolved: the cell reads the path as configured
        if path == here or here in path.parents or not path.exists() or bound(path):
            continue  # missing inputs are reported by the rules that need them
        if any(ch in str(path) for ch in ":,"):
            raise WorkflowConfigError(
                f"{what}: {path}: a path with ':' or ',' cannot be bound into a container "
                "(Apptainer's --bind splits there); move it, or bind a folder above it "
                "in --apptainer-args")
        binds.append(path)
    # A folder inside another bound one needs no bind of its own.
    return sorted(p for p in set(binds) if not any(q in p.parents for q in binds))


def failed_profiles(manifests: Sequence[str]) -> str | None:
    """A line counting this run's profiles recorded as failed (their manifests say so),
    naming the first and its error, or None: a failed profile does not fail the run (the
    report shows it), so without this line the run's end would not say it."""
    failed = []
    for path in manifests:
        try:
            record = json.loads(Path(path).read_text())
        except (OSError, ValueError):
            continue  # not made (the run failed elsewhere) or unreadable: the report says
        if isinstance(record, dict) and record.get("status") == "failed":
            failed.append((path, str(record.get("error") or "").strip()))
    if not failed:
        return None
    first, error = failed[0]
    why = f": {error.splitlines()[0]}" if error else ""
    return (f"dlbench: {len(failed)} of {len(manifests)} profiles failed (first: "
            f"{Path(first).parent}{why}); the report shows each")


# The result files of its own cells the last aggregate found invalid, one path a line:
# the workflow's run cannot move them while it goes on (they are inputs of its target),
# so the next run planning them does.
INVALID_LATER = Path("results/logs/invalid-results.txt")


def record_invalid_later(paths: Sequence[str], own_files: Collection[str] = (),
                         listing: Path = INVALID_LATER) -> None:
    """List this run's invalid result files (``paths``, among its ``own_files``) for the
    next run with their cells. Listed files of other configs' cells stay listed while they
    are there (their runs move them: a run of this config must not drop them); none left:
    no list."""
    from dlbench import atomic

    own = {str(path) for path in own_files}
    kept = ([line for line in listing.read_text().splitlines()
             if line and line not in own and Path(line).is_file()]
            if listing.is_file() else [])
    listed = list(dict.fromkeys([*kept, *(str(p) for p in paths)]))
    if listed:
        atomic.write_text(listing, "".join(f"{p}\n" for p in listed))
    else:
        listing.unlink(missing_ok=True)


def _valid_now(path: Path) -> bool:
    from dlbench import aggregate

    try:
        aggregate.load(path)
    except aggregate.InvalidResult:
        return False
    return True


def _still_invalid(listing: Path) -> list[str]:
    """The files ``listing`` holds that are there and still invalid (none without it)."""
    if not listing.is_file():
        return []
    return [path for path in listing.read_text().splitlines()
            if path and Path(path).is_file() and not _valid_now(Path(path))]


def invalid_to_set_aside(planned: Collection[str], listing: Path = INVALID_LATER
                         ) -> list[str]:
    """The result files ``set_aside_invalid`` would move now (what a dry run says)."""
    wanted = set(planned)
    return [path for path in _still_invalid(listing) if path in wanted]


def set_aside_invalid(planned: Collection[str], listing: Path = INVALID_LATER
                      ) -> list[Path]:
    """Move the result files the last aggregate found invalid that this run plans
    (``planned``, its result files) into invalid/ beside them, so that it measures their
    cells again; the ones moved. Those another config's run plans stay listed for it (moved
    now, they would leave the table with no run to measure them); gone ones are dropped,
    and so are those valid now (the original copied back: kept, not measured again)."""
    from dlbench import aggregate, atomic

    if not listing.is_file():
        return []
    listed = _still_invalid(listing)
    wanted = set(planned)
    # Its job log with it: the cell's next job would write over it.
    moved = [set_aside_run(Path(path), aggregate.INVALID_DIR) for path in listed
             if path in wanted]
    left = [path for path in listed if path not in wanted]
    if left:
        atomic.write_text(listing, "".join(f"{p}\n" for p in left))
    else:
        listing.unlink()
    return moved
