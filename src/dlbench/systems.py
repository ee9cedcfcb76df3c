"""Systems: the machine (and software) a study runs on, named by a label.

A study's results live under ``results/<system>/<study>/``: the same config run on two
machines keeps both, and the aggregate reads every ``results/<system>/`` tree it finds,
including trees copied in from other machines. The label is the config's ``system:``, else
this host's short name (on a cluster, where the driving host is not the compute node, set
it). The folder names the system of the results in it.

A label stands for one machine: the first cell run under a label records the machine's
hardware (CPU model, GPU models and count, driver) in ``results/<system>/system.json``; a
cell launched on other hardware under the same label fails in one line instead of mixing
two machines' figures. Software (framework version, CUDA, cuDNN, container digest) is
recorded with every result and must agree within a label and framework: the aggregate
stops on two software stacks posing under one label (``conflict``).

A results/ tree made before systems (``results/<study>/cells/...``) is adopted as the
current system's on the first run (``adopt``): its files move, no cell reruns.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from dlbench import atomic

RESULTS = Path("results")
# A label is a folder under results/: at most 128 characters (a name has 255 bytes).
LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
# Folders results/ holds for itself: never a system's.
RESERVED = frozenset({"benchmarks", "cache", "cluster-logs", "compare", "datasets", "logs",
                      "profiles", "report", "slurm-logs"})
# Files results/ holds beside the systems' folders (the aggregate, the run's status).
RESERVED_FILES = frozenset({"benchmarks.parquet", "benchmarks.csv", "status.txt"})
MACHINE_FILE = "system.json"
# <cell id>[_r<repeat>].json, a cell id ending in its 8-hex-digit hash (dlbench.study.cell_id).
RESULT_NAME = re.compile(r".+_[0-9a-f]{8}(?:_r(?P<repeat>[1-9][0-9]*))?\.json")
CELLS = "cells"


class SystemLabelError(ValueError):
    """A system label or machine problem, said in one line."""


def default_label(hostname: str | None = None) -> str:
    """This host's short name as a label (characters a label cannot hold become '-')."""
    short = (hostname or socket.gethostname()).split(".")[0]
    label = re.sub(r"[^A-Za-z0-9_.-]", "-", short).lstrip("_.-")
    return label if label and label.casefold() not in RESERVED | RESERVED_FILES else "local"


def check_label(label: Any, where: str = "system") -> str:
    if not isinstance(label, str) or not LABEL.fullmatch(label):
        raise SystemLabelError(f"{where}: {label!r} is not a system label (letters, digits, "
                           "'_', '.', '-'; starting with a letter or digit; at most 128 characters)")
    # case-blind: on a case-insensitive disk (macOS) "Profiles" is results/profiles/
    if label.casefold() in RESERVED:
        raise SystemLabelError(f"{where}: {label!r} is a folder results/ keeps for itself "
                           f"({', '.join(sorted(RESERVED))}); choose another label")
    if label.casefold() in RESERVED_FILES:
        raise SystemLabelError(f"{where}: {label!r} is a file results/ keeps for itself "
                           f"({', '.join(sorted(RESERVED_FILES))}); choose another label")
    return label


# The label of a run, as its main process chose it, for the run's jobs: a cluster job
# runs on another host, and must put its result where the run expects it.
LABEL_ENV = "DLBENCH_SYSTEM"


def label_of(config: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> str:
    """The config's ``system:``, else ``$DLBENCH_SYSTEM``, else this host's label."""
    value = config.get("system")
    if value is not None:
        return check_label(value)
    inherited = (os.environ if environ is None else environ).get(LABEL_ENV)
    return check_label(inherited, LABEL_ENV) if inherited else default_label()


def result_name(cell_id: str, repeat: int = 0) -> str:
    """A cell's result file: ``<cell id>.json`` for its first run (as before repeats
    existed, so raising a study's repeats reruns nothing), ``<cell id>_r<k>.json`` for its
    repeat k. The index is not part of the cell's id or hash."""
    return f"{cell_id}{repeat_suffix(repeat)}.json"


def repeat_suffix(repeat: int) -> str:
    return f"_r{repeat}" if repeat else ""


def repeat_of(result_file: Path) -> int:
    """The repeat index a result file's name gives (0 for a first run)."""
    match = RESULT_NAME.fullmatch(Path(result_file).name)
    return int(match.group("repeat")) if match and match.group("repeat") else 0


def cell_id_of(result_file: Path) -> str:
    """The cell id a result file's name gives (without its repeat suffix)."""
    name = Path(result_file).name.removesuffix(".json")
    return name.removesuffix(repeat_suffix(repeat_of(result_file)))


def result_path(system: str, study: str, cell_id: str, results: Path = RESULTS,
                repeat: int = 0) -> Path:
    return results / system / study / CELLS / result_name(cell_id, repeat)


def system_of(result_file: Path) -> str | None:
    """The system of a result at results/<system>/<study>/cells/<cell>.json (None for a
    file laid out otherwise)."""
    path = Path(result_file)
    if path.parent.name != CELLS or len(path.parents) < 4 \
            or path.parents[3].name != RESULTS.name:
        return None
    return path.parents[2].name or None


def study_of(result_file: Path) -> str | None:
    """The study of a result at results/<system>/<study>/cells/<cell>.json (None for a
    file laid out otherwise)."""
    path = Path(result_file)
    return path.parents[1].name if system_of(path) is not None else None


def is_result_file(path: Path) -> bool:
    """Whether ``path`` is named as a cell's result (``result_name``), not a file a runner
    writes beside it (an operator cell's PARAM log ``<cell id>.param.json``)."""
    return RESULT_NAME.fullmatch(path.name) is not None


def result_files(results: Path = RESULTS) -> list[Path]:
    """Every cell result of every system under ``results`` (sorted)."""
    if not results.is_dir():
        return []
    return sorted(p for p in results.glob(f"*/*/{CELLS}/*.json")
                  if p.parents[2].name not in RESERVED and systems_folder(p.parents[2])
                  and is_result_file(p))


def systems_folder(folder: Path) -> bool:
    """Whether results/<name>/ is a system's (not a study folder of the old layout, which
    has cells/ right inside): a system's records its machine (system.json, written by its
    first cell), which the old layout never had; else no cells/ right inside it."""
    return (folder / MACHINE_FILE).is_file() or not (folder / CELLS).is_dir()


# -- what a system's last run of each study planned ------------------------------------------

# results/<system>/<study>/plan.json: the result files (and profiles) the last run of a config
# naming the study wanted. A run that does not plan the study (another system's, another
# config's) and dlbench compare read it to leave out its stale files: cells dropped from the
# study's grid, repeats beyond its ``repeats``.
PLAN_FILE = "plan.json"


class PlanError(ValueError):
    """A plan file that cannot be read, said in one line."""


class Plan(NamedTuple):
    results: frozenset[str]   # result file names in the study's cells/
    profiles: frozenset[str]  # "<tool>/<cell id>" folders under results/profiles/<system>/


def plan_path(system: str, study: str, results: Path = RESULTS) -> Path:
    return results / system / study / PLAN_FILE


def write_plan(path: Path, plan: Plan) -> bool:
    """Record ``plan`` at ``path`` (atomically); False when it already said so (a run that
    changed nothing rewrites nothing)."""
    text = json.dumps({"results": sorted(plan.results), "profiles": sorted(plan.profiles)},
                      indent=1) + "\n"
    try:
        if path.read_text(encoding="utf-8") == text:
            return False
    except (OSError, UnicodeDecodeError):
        pass
    atomic.write_text(path, text)
    return True


def read_plan(path: Path) -> Plan | None:
    """The plan recorded at ``path``; None where none is (a tree made before plans, or by a
    run that named no such study: all its files count). PlanError for one unreadable."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise PlanError(f"{path}: not a plan ({exc})") from None
    lists = [doc.get(key) if isinstance(doc, dict) else None for key in Plan._fields]
    if not all(isinstance(v, list) and all(isinstance(x, str) for x in v) for v in lists):
        raise PlanError(f"{path}: not a plan (expected lists of names under "
                        f"{' and '.join(Plan._fields)})")
    return Plan(*(frozenset(v) for v in lists))


class Plans:
    """The plans recorded in study folders, each read once: which results and profiles of a
    study count (those its last run planned; all of them where no plan says). ``say`` is
    told of a plan that cannot be read: its study's results all count."""

    def __init__(self, say: Callable[[str], None] | None = None) -> None:
        self._say = say
        self._read: dict[Path, Plan | None] = {}

    def of(self, study_dir: Path) -> Plan | None:
        if study_dir not in self._read:
            try:
                self._read[study_dir] = read_plan(study_dir / PLAN_FILE)
            except PlanError as exc:
                if self._say:
                    self._say(f"dlbench: {exc}: every result of that study is kept")
                self._read[study_dir] = None
        return self._read[study_dir]

    def keeps(self, result_file: Path) -> bool:
        """Whether a result file (``<study>/cells/<name>``) is one its study's plan has."""
        plan = self.of(Path(result_file).parent.parent)
        return plan is None or Path(result_file).name in plan.results

    def keeps_profile(self, system: str, tool: str, study: str, cell: str,
                      results: Path = RESULTS) -> bool:
        plan = self.of(plan_path(system, study, results).parent)
        return plan is None or f"{tool}/{cell}" in plan.profiles


# -- adopting a tree made before systems ----------------------------------------------------


def legacy_study_dirs(results: Path = RESULTS) -> list[Path]:
    """results/<study>/ folders laid out before systems (a cells/ folder right inside)."""
    if not results.is_dir():
        return []
    return sorted(d for d in results.iterdir()
                  if d.is_dir() and d.name not in RESERVED and not systems_folder(d))


def adopt(system: str, results: Path = RESULTS) -> list[tuple[Path, Path]]:
    """Move each pre-system study folder into ``results/<system>/``: (from, to) per move.
    A study folder already there takes the files it lacks; a file it has is left where it
    was (and said by the caller), never overwritten."""
    moves = []
    for old in legacy_study_dirs(results):
        new = results / system / old.name
        if not new.exists():
            moves.append((old, atomic.move(old, new)))
            continue
        for path in sorted(p for p in old.rglob("*") if p.is_file()):
            target = new / path.relative_to(old)
            if target.exists():
                continue
            moves.append((path, atomic.move(path, target)))
    return moves


# -- what a label stands for ----------------------------------------------------------------


def hardware(env: Mapping[str, Any]) -> dict[str, Any]:
    gpus = sorted(env.get("gpu_models") or [])
    return {"cpu_model": env.get("cpu_model"), "gpu_models": gpus, "gpu_count": len(gpus),
            "gpu_driver": env.get("gpu_driver")}


def software(env: Mapping[str, Any]) -> dict[str, Any]:
    # Results written before the PyTorch runners shared one environment collector kept
    # CUDA and cuDNN among the library flags (operator cells only).
    flags = env.get("library_flags") or {}
    cudnn = env.get("cudnn_version") or flags.get("cudnn")
    return {"framework": env.get("framework"), "framework_version": env.get("framework_version"),
            "cuda": env.get("cuda_version") or flags.get("cuda"),
            "cudnn": None if cudnn is None else str(cudnn),
            "nccl": env.get("nccl_version"),
            "container_digest": env.get("container_digest")}


def same_software(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Equal wherever both know a value: a CPU cell may not record cuDNN's version, an
    older result may not record CUDA's; that is no other software stack."""
    return all(a[k] == b[k] for k in a.keys() & b.keys() if a[k] is not None and b[k] is not None)


def fingerprint(env: Mapping[str, Any]) -> dict[str, Any]:
    """What a result's system label stands for: the machine and the cell's software."""
    return {"hardware": hardware(env), "software": software(env)}


def describe(hw: Mapping[str, Any]) -> str:
    gpus = hw.get("gpu_models") or []
    gpu_words = f"{len(gpus)}x {', '.join(sorted(set(gpus)))} (driver {hw.get('gpu_driver')})" \
        if gpus else "no GPU"
    return f"{hw.get('cpu_model') or 'unknown CPU'}, {gpu_words}"


def same_machine(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Same CPU model, and the same GPU models and driver when both sides could see GPUs
    (an environment without NVML's Python bindings sees none; that is no other machine).

    Models, not the list of devices: how many GPUs a process sees is no property of the
    machine. Slurm's device cgroup shows a job only the GPUs it was given, and a cell's
    framework may count only its ``CUDA_VISIBLE_DEVICES``; a 1-GPU and a 2-GPU cell of
    one node are one machine. So are the identical nodes of a partition under one label."""
    if a.get("cpu_model") != b.get("cpu_model"):
        return False
    if a.get("gpu_models") and b.get("gpu_models"):
        return (set(a["gpu_models"]), a.get("gpu_driver")) \
            == (set(b["gpu_models"]), b.get("gpu_driver"))
    return True


def this_machine() -> dict[str, Any]:
    from dlbench import environment

    return hardware({"cpu_model": environment.cpu_model(), **environment.gpus_from_nvml()})


def check_machine(system_dir: Path, machine: Mapping[str, Any] | None = None) -> str | None:
    """None when this machine is the one ``system_dir``'s label stands for (recording it
    if no cell ran under the label yet); else the problem in one line."""
    machine = dict(machine or this_machine())
    path = Path(system_dir) / MACHINE_FILE
    try:
        recorded = json.loads(path.read_text())
    except FileNotFoundError:
        if _record_machine(path, machine):
            return None
        return check_machine(system_dir, machine)  # a cell launched beside it recorded it
    except ValueError:
        return f"{path}: not JSON; remove it to record this machine as system " \
               f"{path.parent.name!r}"
    if same_machine(recorded, machine):
        return None
    return (f"system {path.parent.name!r} is {describe(recorded)} ({path}), but this cell "
            f"runs on {describe(machine)}: give this machine its own `system:` label")


def _record_machine(path: Path, machine: Mapping[str, Any]) -> bool:
    """Record ``machine`` at ``path`` unless a file is there already (False then).

    Written whole under a name of this process's own, then linked into place: a cell
    launched beside the first (a cluster's first run starts many at once) reads either no
    file or the whole of it, never the empty file an ``open(path, "x")`` shows first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    draft = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        draft.write_text(json.dumps(dict(machine), indent=1, sort_keys=True))
        try:
            os.link(draft, path)
        except FileExistsError:
            return False
        except OSError:  # a file system without hard links: create it in place
            try:
                with open(path, "x") as f:
                    f.write(draft.read_text())
            except FileExistsError:
                return False
        return True
    finally:
        draft.unlink(missing_ok=True)


def conflict(rows: Iterable[Mapping[str, Any]]) -> str | None:
    """Two machines, or two software stacks of one framework, under one label among result
    rows (each with ``system``, ``source`` and ``fingerprint``), in one line; else None."""
    machines: dict[str, tuple[Mapping[str, Any], str]] = {}
    stacks: dict[tuple[str, str], tuple[Mapping[str, Any], str]] = {}
    advice = "one label must name one machine and software stack: give the other its own " \
             "`system:` label"
    for row in rows:
        fp, system, source = row.get("fingerprint"), row.get("system"), str(row.get("source"))
        if not fp or not system:
            continue
        hw, sw = fp.get("hardware") or {}, fp.get("software") or {}
        if hw.get("cpu_model"):
            first = machines.setdefault(system, (hw, source))
            if not same_machine(first[0], hw):
                return (f"system {system!r}: two machines, {describe(first[0])} ({first[1]}) "
                        f"and {describe(hw)} ({source}); {advice}")
        if sw.get("framework_version"):  # a cell whose runner never started knows none
            first_sw = stacks.setdefault((system, str(sw.get("framework"))), (sw, source))
            if not same_software(first_sw[0], sw):
                return (f"system {system!r}: two {sw.get('framework')} software stacks, "
                        f"{json.dumps(first_sw[0], sort_keys=True)} ({first_sw[1]}) and "
                        f"{json.dumps(sw, sort_keys=True)} ({source}); {advice}")
    return None
