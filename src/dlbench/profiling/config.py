"""The ``profiling`` config: which cells to profile with which tools, and each tool's settings.

    profiling:
      select:
        - match: {model: resnet50, batch_size: 64, precision: bfloat16}
          tools: [torch, ncu]
      tools:
        ncu: {binary: /opt/nvidia/nsight-compute/ncu, metrics: [gpu__time_duration.sum]}

A selection's ``match`` holds axis values (a value or a list of values, as in a study's
overrides; ``study`` names a study) and is matched against the expanded cells. Each tool's
settings (names, defaults, checks) are declared in its module under
``dlbench/profiling/tools/`` and found through ``dlbench.profiling.registry``. Every problem
is one line naming the field.
"""

from __future__ import annotations

import contextlib
import copy
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlbench import axes as A
from dlbench import study as S
from dlbench.profiling import registry
from dlbench.profiling.spec import ProfilingConfigError

PROFILES_DIR = "results/profiles"
MANIFEST = "profile.json"
CAPTURE = "capture.json"  # the profiled run's record, made in the framework environment
ERROR_FILE = "error.txt"  # a failure the profiled run could not record in its manifest
TOOLS = registry.names()  # the workflow's {tool} wildcard (workflow/rules/profile.smk)


def settings(tool: str, given: Mapping[str, Any] | None = None,
             where: str | None = None) -> dict[str, Any]:
    """The tool's settings (declared in its module): defaults overlaid with ``given``,
    checked."""
    where = where or f"profiling.tools.{tool}"
    spec = registry.get(tool).settings
    given = dict(given or {})
    known = [s.name for s in spec]
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise ProfilingConfigError(f"{where}.{unknown[0]}: unknown setting "
                                   f"(valid: {', '.join(known)})")
    # A copy of each default: a job that changes its list must not change the next job's.
    merged = {s.name: given[s.name] if s.name in given else copy.deepcopy(s.default)
              for s in spec}
    for setting in spec:
        setting.check(f"{where}.{setting.name}", merged[setting.name])
    return merged


def tool_settings(config: Mapping[str, Any], tool: str) -> dict[str, Any]:
    tools = (config.get("profiling") or {}).get("tools") or {}
    return settings(tool, tools.get(tool))


@dataclass(frozen=True)
class ProfileJob:
    """A profile of one cell by one tool on one system: like the cell's results, each
    system (machine, software stack) has its own, in results/profiles/<system>/."""
    tool: str
    cell: S.Cell
    system: str

    @property
    def out_dir(self) -> str:
        return f"{PROFILES_DIR}/{self.system}/{self.tool}/{self.cell.study}/{self.cell.id}"

    @property
    def target(self) -> str:
        return f"{self.out_dir}/{MANIFEST}"


def _why_none(config: Mapping[str, Any], cells: Sequence[S.Cell],
              match: Mapping[str, Any]) -> str:
    """The first of ``match``'s keys that no cell has a value of, said with the values the
    cells have (a misspelt study, a value no grid holds, one this CPU emulates and a
    study's ``precisions: native`` left out); empty where only the combination is absent."""
    for key, wanted in match.items():
        if not any(_matches(cell, {key: wanted}) for cell in cells):
            have = sorted({str(c.study if key == "study" else c.params.get(key))
                           for c in cells})
            shown = ", ".join(have[:12]) + (", ..." if len(have) > 12 else "")
            hint = ""
            if key == "precision" and _left_out_as_emulated(config, match):
                hint = ("; this CPU emulates it, and a study with precisions: native leaves "
                        "such cells out")
            return f": no cell has {key} {wanted!r} (the cells have: {shown}){hint}"
    return " (each value is some cell's, but no cell has them all)"


def _left_out_as_emulated(config: Mapping[str, Any], match: Mapping[str, Any]) -> bool:
    """Whether a study with ``precisions: native`` would have a cell that ``match`` selects
    but for this CPU emulating its precision: the study expanded again with every
    precision (its warnings were said once already)."""
    for name, spec in (config.get("studies") or {}).items():
        if not isinstance(spec, Mapping) or spec.get("precisions") != "native":
            continue
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                every = S.expand_study(name, {**spec, "precisions": "all"}, config)
        except S.ConfigError:
            continue
        if any(_matches(cell, match) and not S.native_here(cell.params) for cell in every):
            return True
    return False


def _matches(cell: S.Cell, match: Mapping[str, Any]) -> bool:
    for key, wanted in match.items():
        values = wanted if isinstance(wanted, list) else [wanted]
        if key == "study":
            have = cell.study
        else:  # a value spelled as the axis allows (precision bf16 is bfloat16)
            values = [A.get(key).normalise(v) for v in values]
            have = cell.params.get(key)
        if have not in values:
            return False
    return True


def _check_tool_fits(where: str, tool: str, cell: S.Cell) -> None:
    nodes = cell.params.get("num_nodes") or 1
    if nodes > 1:
        # A tool wraps the runner on the job's first node; the other nodes' ranks would go
        # unprofiled, and the profile job asks the scheduler for one node.
        raise ProfilingConfigError(f"{where}: cell {cell.study}/{cell.id} spans {nodes} nodes; "
                                   "profiles are of one-node cells (num_nodes: 1)")
    problem = registry.get(tool).check_cell(cell)
    if problem:
        raise ProfilingConfigError(f"{where}: {problem}")


def select_jobs(config: Mapping[str, Any], cells: Sequence[S.Cell], *,
                system: str) -> list[ProfileJob]:
    """The profile jobs the config asks for, one per (tool, cell), in config order."""
    profiling = config.get("profiling") or {}
    if not isinstance(profiling, Mapping):
        raise ProfilingConfigError("profiling: must be a mapping with select and tools")
    unknown = sorted(set(profiling) - {"select", "tools"})
    if unknown:
        raise ProfilingConfigError(f"profiling.{unknown[0]}: unknown key (valid: select, tools)")
    for tool in profiling.get("tools") or {}:
        settings(tool, (profiling.get("tools") or {})[tool])
    axes = {"study", *(axis.name for axis in A.table())}
    jobs: list[ProfileJob] = []
    for i, selection in enumerate(profiling.get("select") or []):
        where = f"profiling.select[{i}]"
        if not isinstance(selection, Mapping) or set(selection) != {"match", "tools"}:
            raise ProfilingConfigError(f"{where}: needs exactly the keys match and tools")
        match, tools = selection["match"], selection["tools"]
        if not isinstance(match, Mapping):
            raise ProfilingConfigError(f"{where}.match: must be a mapping of axis: value")
        bad = [key for key in match if key not in axes]
        if bad:
            raise ProfilingConfigError(f"{where}.match: unknown axis {bad[0]!r}")
        if not isinstance(tools, list) or not tools:
            raise ProfilingConfigError(f"{where}.tools: must be a non-empty list of tools")
        for tool in tools:
            registry.get(tool, f"{where}.tools")
        chosen = [cell for cell in cells if _matches(cell, match)]
        if not chosen:
            raise ProfilingConfigError(f"{where}.match: matches no cell of any study"
                                       f"{_why_none(config, cells, match)}")
        for tool in tools:
            for cell in chosen:
                _check_tool_fits(where, tool, cell)
                job = ProfileJob(tool, cell, system)
                if job not in jobs:
                    jobs.append(job)
    return jobs


def adopt(system: str, root: Path = Path(PROFILES_DIR)) -> list[tuple[Path, Path]]:
    """Profiles made before they were kept per system (``root/<tool>/<study>/<cell>/``,
    logs in ``root/logs/<tool>/``) move under ``system`` as the run's results did
    (dlbench.systems.adopt): (from, to) per move; nothing is overwritten, nothing reruns.
    A folder of the old layout holds a profile's files right inside ``<tool>/<study>/
    <cell>/``; a system's is one level deeper, so a system named like a tool is left."""
    from dlbench import atomic

    made = (MANIFEST, CAPTURE, ERROR_FILE)
    moves = []
    for tool in TOOLS:
        for folder in sorted(root.glob(f"{tool}/*/*")):
            if not (folder.is_dir() and any((folder / name).is_file() for name in made)):
                continue
            target = root / system / folder.relative_to(root)
            if not target.exists():
                moves.append((folder, atomic.move(folder, target)))
        for log in sorted((root / "logs").glob(f"{tool}/*/*.log")):
            target = root / "logs" / system / log.relative_to(root / "logs")
            if not target.exists():
                moves.append((log, atomic.move(log, target)))
    return moves
