"""Studies: named grids of cells, expanded and validated before any job runs.

A config holds ``studies``; each study has a ``kind`` (dlbench.kinds: model cells or
operator cells), a
``grid`` whose list-valued axes expand to their Cartesian product, ``overrides`` that set
values on the cells matching some axis values, and ``exclude`` rules that drop cells.
Every problem is reported as one line naming the study and the field. The axes, their
defaults and their checks come from the axis table (dlbench.axes).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import math
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlbench import axes, config_schema, cpu, kinds, systems

STUDY_KEYS = ("kind", "grid", "overrides", "exclude", "description", "precisions",
              "timeout_s", "repeats", "calibrate")
# The study holding the calibration cells that studies ask for with ``calibrate: true``
# (one per device they use; dlbench.calibrate): results/<system>/calibration/.
CALIBRATION_STUDY = "calibration"
# A cell's runner is stopped after a study's timeout_s (default one hour; a hung cell must
# not hold the benchmark slot forever).
DEFAULT_TIMEOUT_S = 3600
# A config expanding to more cell runs (cells times their study's repeats, each a job) than
# this is refused before the cells are made (ten million cells took 11 GB and ten minutes,
# then crashed): config key max_cells raises it.
DEFAULT_MAX_CELLS = 100_000
# Repeats of a cell are separate jobs of separate rules (one per repeat, so that the
# scheduler can run them round by round): a bound keeps the workflow's rules few.
MAX_REPEATS = 50
# Names become folders: checked with fullmatch, since '$' also matches before a trailing
# newline ("s1\n" would pass, and no job could make its folder's files). A folder's name
# has at most 255 bytes; a longer one passed and then no job could write its results.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
NAME_RULE = ("use letters, digits, '_', '-' and '.' only, starting with a letter or digit, "
             "at most 128 characters")
# What results/<system>/ holds beside its studies' folders (results/<system>/<study>/),
# and why a study may not take the name. Compared case-blind: on a case-insensitive file
# system (macOS) 'Cells' is the folder 'cells'.
RESERVED_STUDIES = {
    systems.CELLS: f"a {systems.CELLS}/ folder right inside results/<system>/ makes it look "
                   "like a study folder of the layout before systems, which is moved",
    "cache": "results/<system>/cache/ holds the compiled cells' inductor caches",
    systems.MACHINE_FILE: f"results/<system>/{systems.MACHINE_FILE} records the system's "
                          "machine",
}
# What results/datasets/ holds beside the datasets' folders.
RESERVED_DATASETS = {"logs": "results/datasets/logs/ holds the datasets' conversion logs",
                     # data: synthetic is no dataset: cells would run on random tensors
                     "synthetic": "data: synthetic means random tensors, no dataset"}
# A study's 'precisions': every cell (all), or on a CPU only those it computes natively.
STUDY_PRECISIONS = ("all", "native")


class ConfigError(ValueError):
    """A config problem, said in one line naming the study and field."""


def warn(message: str) -> None:
    """A config oddity that does not stop the run (a rule matching nothing): one line."""
    print(f"dlbench config warning: {message}", file=sys.stderr)


@dataclass(frozen=True)
class Cell:
    study: str
    kind: str  # a cell kind of dlbench.kinds: "model" | "ops"
    params: Mapping[str, Any]

    @functools.cached_property
    def id(self) -> str:  # computed once: the workflow asks for it for every job
        return cell_id(self.kind, self.params)

    def to_json(self) -> str:
        return self._json

    @functools.cached_property
    def _json(self) -> str:  # once: the workflow asks per job and per printout
        return json.dumps({"study": self.study, "kind": self.kind, "cell_id": self.id,
                           "params": axes.job_params(self.params)}, sort_keys=True)


def cell_id(kind: str, params: Mapping[str, Any]) -> str:
    """Readable axes, then a hash of every parameter: a new value of any parameter (say
    num_batches) gives a new id, so Snakemake reruns exactly the cells it changes."""
    readable = kinds.get(kind).readable_id(params)
    text = json.dumps(axes.id_params(params), sort_keys=True)
    return "_".join([*readable, hashlib.sha256(text.encode()).hexdigest()[:8]])


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


def _fail(study: str, field: str, message: str) -> ConfigError:
    return ConfigError(f"study '{study}': {field}: {message}")


def _enum(study: str, field: str, value: Any, valid: Iterable[str]) -> None:
    valid = list(valid)
    if value not in valid:
        raise _fail(study, field, f"unknown value {value!r} (valid: {', '.join(valid)})")


def _check_cell(study: str, kind: str, p: dict[str, Any], datasets: Mapping[str, Any],
                from_defaults: Iterable[str] = (),
                set_by: Mapping[str, int] | None = None) -> None:
    """The cell's axes and its kind's checks; ``from_defaults``: the axes whose value the
    config's defaults gave, ``set_by``: the override that set an axis, by axis, each named
    so (the study's grid does not hold them)."""
    try:
        axes.check(kind, p)
        kinds.get(kind).check(p, datasets)
    except axes.AxisError as exc:
        field = exc.field
        if set_by and exc.field in set_by:
            field = f"{exc.field} (from overrides[{set_by[exc.field]}].set)"
        elif exc.field in from_defaults:
            field = f"{exc.field} (from defaults.{kind})"
        raise _fail(study, field, str(exc)) from None


def _matches(cell: Mapping[str, Any], rule: Mapping[str, Any]) -> bool:
    return all(cell.get(k) in _as_list(v) for k, v in rule.items())


def _normalised_rule(rule: Mapping[str, Any]) -> dict[str, list[Any]]:
    """A match rule's values spelled as the cells' are (the grid's aliases are normalised:
    precision f32 is float32), so that a rule written with an alias matches its cells."""
    return {key: [axes.get(key).normalise(v) for v in _as_list(value)]
            for key, value in rule.items()}


def _normalise(p: dict[str, Any]) -> dict[str, Any]:
    for name, value in p.items():
        if isinstance(value, str):
            p[name] = axes.get(name).normalise(value)
    return p


def native_here(params: Mapping[str, Any]) -> bool:
    """Whether a cell's precision is native where the study is expanded. Only CPU cells can
    be told apart here (the driver does not see the GPUs its cells will get); a CPU whose
    cpuinfo cannot be read counts as native, so nothing is dropped on a guess."""
    precision = params.get("precision")
    if params.get("device") != "cpu" or not isinstance(precision, str):
        return True
    info = cpu.this_cpu()
    return info is None or info.native(precision)


def emulated_cells(cells: Iterable[Cell]) -> list[Cell]:
    """The CPU model cells whose precision this CPU emulates (slow: say so before a run)."""
    return [c for c in cells if c.kind == "model" and not native_here(c.params)]


def _number(study: str, field: str, value: Any, minimum: float) -> float:
    # not finite: YAML's .inf and .nan pass a comparison with the minimum (nan < 1 is false)
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum
            or not math.isfinite(value)):
        hint = config_schema.number_text_hint(value)  # 1e9 is text to YAML 1.1
        raise _fail(study, field, f"must be a number >= {minimum:g}, got {value!r}{hint}")
    return value


def timeout_s(name: str, study: Mapping[str, Any], config: Mapping[str, Any]) -> float:
    """How long a cell of the study may run before it is stopped: the study's timeout_s,
    else the config's, else DEFAULT_TIMEOUT_S."""
    value = study.get("timeout_s", config.get("timeout_s", DEFAULT_TIMEOUT_S))
    return _number(name, "timeout_s", value, 1)


def repeats(name: str, study: Mapping[str, Any], config: Mapping[str, Any]) -> int:
    """How many times each cell of the study runs, each run a process of its own (the
    study's repeats, else the config's, else 1): dlbench.systems.result_path names them."""
    value = study.get("repeats", config.get("repeats", 1))
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        hint = config_schema.number_text_hint(value, integer=True)
        raise _fail(name, "repeats", f"must be a positive integer, got {value!r}{hint}")
    if value > MAX_REPEATS:
        raise _fail(name, "repeats", f"at most {MAX_REPEATS}, got {value}")
    return value


def max_cells(config: Mapping[str, Any]) -> int:
    value = config.get("max_cells", DEFAULT_MAX_CELLS)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        hint = config_schema.number_text_hint(value, integer=True)
        raise ConfigError(f"config: max_cells: must be a positive integer, got {value!r}{hint}")
    return value


def expand_study(name: str, study: Mapping[str, Any], config: Mapping[str, Any],
                 cap: int | None = None) -> list[Cell]:
    """The study's cells, validated. ``cap``: the most runs (cells times repeats) it may
    have (checked on the grid's size before any cell is made)."""
    if not _NAME.fullmatch(name):
        # repr: a name with a newline or a quote in it is still said in one line.
        raise ConfigError(f"study {name!r}: name: {NAME_RULE}")
    reserved = RESERVED_STUDIES.get(name.casefold())
    if reserved:
        raise _fail(name, "name", f"{name!r} is reserved ({reserved}); choose another name")
    if not isinstance(study, Mapping):
        raise _fail(name, "study", "must be a mapping with a grid")
    kind = study.get("kind", "model")
    _enum(name, "kind", kind, kinds.names())
    axis_defaults = axes.defaults(kind)
    unknown = sorted(set(study) - set(STUDY_KEYS))
    if unknown:
        raise _fail(name, unknown[0], f"unknown key (valid: {', '.join(STUDY_KEYS)})")
    precisions = study.get("precisions", "all")
    _enum(name, "precisions", precisions, STUDY_PRECISIONS)
    timeout_s(name, study, config)
    runs = repeats(name, study, config)
    own = study.get("grid") or {}
    grid = {**(config.get("defaults") or {}).get(kind, {}), **own}

    def grid_field(key: str) -> str:  # where the value was given: the study or the defaults
        return f"grid.{key}" if key in own else f"defaults.{kind}.{key}"

    for key in grid:
        if key not in axis_defaults:
            raise _fail(name, grid_field(key),
                        f"unknown axis (valid: {', '.join(axis_defaults)})")
    for key, default in axis_defaults.items():
        if default is axes.REQUIRED and key not in grid:
            raise _fail(name, f"grid.{key}", "is required")
    # Values are normalised here, once each, rather than in every cell of the product.
    values = {key: [axes.get(key).normalise(v) for v in _as_list(grid.get(key, default))]
              for key, default in axis_defaults.items()}
    for key, vals in values.items():
        if not vals:
            raise _fail(name, grid_field(key), "is an empty list")
    size = math.prod(len(vals) for vals in values.values())
    # Each repeat of a cell is a job of its own: max_cells bounds the runs.
    if cap is not None and size * runs > cap:
        what = (f"{size:,} cells (the product of its axes' value counts)" if runs == 1 else
                f"{size:,} cells (the product of its axes' value counts) x {runs} repeats "
                f"= {size * runs:,} runs")
        raise _fail(name, "grid", f"{what} is more than max_cells allows ({cap:,} left of "
                                  f"{max_cells(config):,}); raise max_cells in the config "
                                  "(or snakemake's --config max_cells=N) to run it")
    rules = study.get("exclude") or []
    overrides = study.get("overrides") or []
    for i, rule in enumerate(rules):
        bad = [k for k in (rule if isinstance(rule, Mapping) else {"?": 0})
               if k not in axis_defaults]
        if bad:
            raise _fail(name, f"exclude[{i}]", f"unknown axis {bad[0]!r}")
    for i, ov in enumerate(overrides):
        if not isinstance(ov, Mapping) or set(ov) != {"match", "set"}:
            raise _fail(name, f"overrides[{i}]", "needs exactly the keys match and set")
        for key in ("match", "set"):
            if not isinstance(ov[key], Mapping):
                raise _fail(name, f"overrides[{i}].{key}",
                            f"must be a mapping of axes to values, got {ov[key]!r}")
        bad = [k for k in [*ov["match"], *ov["set"]] if k not in axis_defaults]
        if bad:
            raise _fail(name, f"overrides[{i}]", f"unknown axis {bad[0]!r}")
    # Once per rule, not per cell; the keys are axes (checked above).
    rules = [_normalised_rule(rule) for rule in rules]
    matches = [_normalised_rule(ov["match"]) for ov in overrides]
    datasets = config.get("datasets") or {}
    # Axes only the config's defaults give (no override sets them either).
    from_defaults = set(grid) - set(own) - {k for ov in overrides for k in ov["set"]}
    cells: list[Cell] = []
    seen: set[str] = set()
    used_overrides: set[int] = set()
    used_rules: set[int] = set()
    dropped_as_emulated = 0
    for combo in itertools.product(*values.values()):
        params = dict(zip(values, combo, strict=True))
        set_by: dict[str, int] = {}
        for i, ov in enumerate(overrides):
            if _matches(params, matches[i]):
                params.update(ov["set"])
                set_by.update(dict.fromkeys(ov["set"], i))
                used_overrides.add(i)
        if set_by:
            params = _normalise(params)
        excluded_by = [i for i, rule in enumerate(rules) if _matches(params, rule)]
        if excluded_by:
            used_rules.update(excluded_by)
            continue
        # Checked before the native filter, which would drop an unknown precision as one
        # this CPU does not compute natively.
        _check_cell(name, kind, params, datasets, from_defaults, set_by)
        if precisions == "native" and not native_here(params):
            dropped_as_emulated += 1
            continue
        cell = Cell(name, kind, axes.blank_unused(kind, params))
        if cell.id not in seen:
            seen.add(cell.id)
            cells.append(cell)
    _warn_repeated_measurements(name, kind, cells)
    for i in sorted(set(range(len(overrides))) - used_overrides):
        warn(f"study '{name}': overrides[{i}]: matches no cell of the grid")
    for i in sorted(set(range(len(rules))) - used_rules):
        warn(f"study '{name}': exclude[{i}]: matches no cell of the grid")
    if not cells:
        why = ("precisions: native drops every cell (this CPU emulates all their precisions)"
               if dropped_as_emulated else "exclude: removes every cell of the grid")
        raise _fail(name, *why.split(": ", 1))
    return cells


def _warn_repeated_measurements(study: str, kind: str, cells: list[Cell]) -> None:
    """Cells whose ids differ only in axes their runner ignores (a synthetic cell's
    num_loader_threads, a CPU cell's cudnn_benchmark) measure one thing several times:
    said once, naming the axes and a pair of such cells, so the grid can exclude them."""
    first: dict[str, Cell] = {}
    repeated, axes_named, example = 0, set(), None
    for cell in cells:
        key = json.dumps(axes.measured_params(kind, cell.params), sort_keys=True,
                         default=str)
        other = first.setdefault(key, cell)
        if other is cell:
            continue
        repeated += 1
        axes_named.update(k for k, v in cell.params.items() if other.params.get(k) != v)
        example = example or (other, cell)
    if example:
        names = ", ".join(sorted(axes_named))
        warn(f"study '{study}': {repeated} of its {len(cells)} cells repeat another's "
             f"measurement: they differ from it only in {names}, which their runner "
             f"ignores for them or which only spell out a default (e.g. cells "
             f"{example[0].id} and {example[1].id}); an "
             "exclude rule would save their time")


def _check_text_name(what: str, name: Any) -> None:
    """A study's or dataset's name as YAML gives it is text: ``2024:`` is the integer 2024
    and ``1.50:`` the float 1.5, which the config's other tables (repeats, timeouts,
    calibrate, profiling's match) would hold under a key other than the cells' name."""
    if not isinstance(name, str):
        raise ConfigError(f"{what} {name!r}: name: a name is text; quote it in the YAML "
                          f"('{name}')")


def check_datasets(datasets: Mapping[str, Any]) -> None:
    """A dataset's name becomes a folder under results/datasets/: letters, digits, '_',
    '-' and '.' only. One read from the user's own ImageFolder must exist before anything
    runs."""
    for name, spec in datasets.items():
        _check_text_name("dataset", name)
        if not _NAME.fullmatch(str(name)):
            # repr: a name with a newline or a quote in it is still said in one line.
            raise ConfigError(f"dataset {str(name)!r}: name: {NAME_RULE}")
        reserved = RESERVED_DATASETS.get(str(name).casefold())
        if reserved:
            raise ConfigError(f"dataset '{name}': name: {str(name)!r} is reserved ({reserved}); "
                              "choose another name")
        path = (spec or {}).get("path")
        if path is not None and not Path(path).is_dir():
            raise ConfigError(f"dataset '{name}': path: {path} is not a folder")
        problem = path is not None and kinds.input_path_problem(str(path))
        if problem:
            raise ConfigError(f"dataset '{name}': path: {problem}")


def check_defaults(defaults: Any) -> None:
    """The config's defaults, per kind, are axes of that kind: checked once for the config
    (not as a study's grid, where a typo would be blamed on the first study using them),
    and also where no study of the kind uses them."""
    if not isinstance(defaults, Mapping):
        raise ConfigError(f"config: defaults: must be a mapping of kinds to axis values, "
                          f"got {defaults!r}")
    for kind, values in defaults.items():
        if kind not in kinds.names():
            raise ConfigError(f"config: defaults.{kind}: unknown kind "
                              f"(valid: {', '.join(kinds.names())})")
        if not isinstance(values, Mapping):
            raise ConfigError(f"config: defaults.{kind}: must be a mapping of axes to values, "
                              f"got {values!r}")
        valid = axes.defaults(kind)
        for key, value in values.items():
            if key not in valid:
                raise ConfigError(f"config: defaults.{kind}.{key}: unknown axis of {kind} cells "
                                  f"(valid: {', '.join(valid)})")
            # Each value as any value of its axis must be, here: where every study sets
            # the axis itself, no cell would ever check it.
            for item in _as_list(value):
                try:
                    axes.check_value(axes.get(key), axes.get(key).normalise(item))
                except axes.AxisError as exc:
                    raise ConfigError(f"config: defaults.{kind}.{key}: {exc}") from None


# What an image path or URI holds (docker://nvcr.io/nvidia/pytorch:24.05-py3,
# oras://host/img@sha256:..., images/pytorch.sif): Snakemake pastes the image into the
# shell command of each containerised job unquoted, so nothing a shell would read, nor a
# leading '-', which Apptainer would read as an option of its own.
_IMAGE = re.compile(r"[A-Za-z0-9._/:@+][A-Za-z0-9._/:@+-]*")


def check_frameworks(settings: Mapping[str, Any]) -> None:
    """Settings may name only frameworks dlbench has (dlbench.frameworks), and images only
    by characters a path or URI uses."""
    from dlbench import frameworks

    for name, values in settings.items():
        if name not in frameworks.names():
            raise ConfigError(f"config: frameworks.{name}: unknown framework "
                              f"(valid: {', '.join(frameworks.names())})")
        image = (values or {}).get("container") if isinstance(values, Mapping) else None
        if isinstance(image, str) and image and not _IMAGE.fullmatch(image):
            raise ConfigError(f"config: frameworks.{name}.container: {image!r}: an image is a "
                              "path or URI of letters, digits and ._-/:@+ only, not starting with '-'")


def expand_config(config: Mapping[str, Any]) -> list[Cell]:
    """All cells of all studies, validated."""
    check_frameworks(config.get("frameworks") or {})
    check_datasets(config.get("datasets") or {})
    check_defaults(config.get("defaults") or {})
    studies = config.get("studies")
    if not isinstance(studies, Mapping) or not studies:
        raise ConfigError("config: studies: at least one study is required")
    limit, used = max_cells(config), 0
    cells: list[Cell] = []
    for name in studies:
        _check_text_name("study", name)
    for name, study in studies.items():
        made = expand_study(name, study, config, cap=limit - used)
        used += len(made) * repeats(name, study, config)
        cells.extend(made)
    return cells + calibration_cells(studies, cells)


def calibration_cells(studies: Mapping[str, Any], cells: list[Cell]) -> list[Cell]:
    """One calibration cell per device that the studies with ``calibrate: true`` use, in
    the study CALIBRATION_STUDY. A study of that name with kind calibrate may list them
    itself, with sizes of its own (gemm_sizes, stream_elements): a device it calibrates
    is not calibrated again at the default sizes."""
    for name, study in studies.items():
        value = study.get("calibrate", False) if isinstance(study, Mapping) else False
        if not isinstance(value, bool):
            raise _fail(str(name), "calibrate", f"must be true or false, got {value!r}")
    asking = {name for name, study in studies.items() if study.get("calibrate")}
    if asking and any(c.study == CALIBRATION_STUDY and c.kind != "calibrate" for c in cells):
        # Its cells would stand for the calibration cells (and share their folder).
        raise _fail(CALIBRATION_STUDY, "kind", f"the study named '{CALIBRATION_STUDY}' holds "
                    f"the calibration cells that {sorted(asking)[0]!r} asks for (calibrate: "
                    "true): its kind must be calibrate; name this study otherwise")
    devices = sorted({c.params.get("device") for c in cells if c.study in asking} - {None})
    have = {c.params.get("device") for c in cells if c.study == CALIBRATION_STUDY}
    return [Cell(CALIBRATION_STUDY, "calibrate", {"framework": "pytorch", "device": device})
            for device in devices if device not in have]
