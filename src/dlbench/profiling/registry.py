"""The profilers dlbench knows: one module per tool under ``dlbench.profiling.tools``.

Every module there (not starting with ``_``) defines ``PROFILER``, an instance of a
``base.Profiler`` subclass; adding a profiler is adding such a module. The config check,
the job runner, the tables, the summary and the report find a tool only through ``get``.

    python -m dlbench.profiling.registry   # the config schema's ``profiling:`` part, as YAML

prints what ``workflow/schemas/config.schema.yaml`` must hold under ``profiling`` (a test
compares the two), so that a setting is declared once, in its tool module.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from types import ModuleType
from typing import Any

from dlbench.profiling import tools as _tools
from dlbench.profiling.base import Profiler
from dlbench.profiling.spec import ProfilingConfigError


def discover(package: ModuleType) -> tuple[Profiler, ...]:
    """The ``PROFILER`` of each module of ``package``, by their ``order``. A module that
    defines none, or a second tool of the same name, is a programming error (TypeError)."""
    found: dict[str, Profiler] = {}
    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        profiler = getattr(module, "PROFILER", None)
        if not isinstance(profiler, Profiler):
            raise TypeError(f"{module.__name__}: no PROFILER (a dlbench.profiling.base.Profiler)")
        if profiler.name in found:
            raise TypeError(f"{module.__name__}: a second profiler named {profiler.name!r}")
        _check_declaration(module.__name__, profiler)
        found[profiler.name] = profiler
    return tuple(sorted(found.values(), key=lambda p: (p.order, p.name)))


def _check_declaration(where: str, profiler: Profiler) -> None:
    """A tool module's own mistakes, caught when it is loaded rather than in a user's run:
    a setting declared twice, or a default its own check refuses."""
    names = [s.name for s in profiler.settings]
    if len(set(names)) != len(names):
        raise TypeError(f"{where}: a setting is declared twice ({', '.join(names)})")
    for setting in profiler.settings:
        try:
            setting.check(f"{profiler.name}.{setting.name}", setting.default)
        except ProfilingConfigError as exc:
            raise TypeError(f"{where}: default refused: {exc}") from None


@functools.cache
def profilers() -> tuple[Profiler, ...]:
    """Every tool, in their order (the order of lists, messages and the report)."""
    return discover(_tools)


def names() -> tuple[str, ...]:
    return tuple(p.name for p in profilers())


def find(tool: str) -> Profiler | None:
    return next((p for p in profilers() if p.name == tool), None)


def get(tool: str, where: str = "profiling.tools") -> Profiler:
    """The tool named ``tool``; an unknown one is one line naming ``where`` and the valid."""
    profiler = find(tool)
    if profiler is None:
        raise ProfilingConfigError(
            f"{where}: unknown tool {tool!r} (valid: {', '.join(names())})")
    return profiler


def schema_fragment() -> dict[str, Any]:
    """The JSON schema of the config's ``profiling`` key (config.schema.yaml holds it)."""
    return {
        "type": "object",
        "description": "Cells to profile, each with some tools, as separate jobs under "
                       "results/profiles/<system>/<tool>/<study>/<cell>/. Values are checked by "
                       "dlbench.profiling.config; each tool's settings are declared in its "
                       "module under dlbench/profiling/tools/.",
        "additionalProperties": False,
        "properties": {
            "select": {"type": "array", "items": {
                "type": "object", "required": ["match", "tools"], "additionalProperties": False,
                "properties": {
                    "match": {"type": "object", "description": "Axis values (a value or a "
                              "list) the cells must have; 'study' names a study."},
                    "tools": {"type": "array", "minItems": 1,
                              "items": {"enum": list(names())}},
                }}},
            "tools": {"type": "object", "additionalProperties": False, "properties": {
                p.name: {"type": "object", "additionalProperties": False,
                         "description": p.description,
                         "properties": {s.name: s.schema() for s in p.settings}}
                for p in profilers()}},
        },
    }


def schema_yaml() -> str:
    """``schema_fragment`` as YAML in config.schema.yaml's style: a mapping that holds
    mappings in block style, any other on one line (a setting is one line)."""
    lines = ["# Made from dlbench/profiling/tools/ by `python -m dlbench.profiling.registry`; "
             "a test compares.", *_yaml_lines({"profiling": schema_fragment()}, 0)]
    return "".join(f"{line}\n" for line in lines)


def _yaml_lines(node: dict[str, Any], depth: int) -> list[str]:
    lines = []
    for key, value in node.items():
        head = f"{'  ' * depth}{_flow(key)}:"
        if isinstance(value, dict) and any(isinstance(v, dict) for v in value.values()):
            lines += [head, *_yaml_lines(value, depth + 1)]
        else:
            lines.append(f"{head} {_flow(value)}")
    return lines


def _flow(value: Any) -> str:
    """One value in YAML flow style, quoted where YAML needs it."""
    import yaml  # only this helper needs it

    text = yaml.safe_dump([value], default_flow_style=True, sort_keys=False, width=float("inf"))
    return text.strip()[1:-1]


if __name__ == "__main__":
    print(schema_yaml(), end="")
