"""Cell kinds as plug-ins: one module each (model cells, PARAM operator cells, calibration,
language-model inference, collective communication).

A kind says how its cells are named (the readable part of the cell id), which rules join
several axes (the table in dlbench.axes checks each axis alone), which runner runs a cell
and with which arguments, and which files a cell reads. Its axes are the rows of the axis
table whose ``kinds`` name it. To add a kind: one module here with a ``KIND``, listed in
``BUILTIN``.
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

BUILTIN = ("dlbench.kinds.model", "dlbench.kinds.ops", "dlbench.kinds.calibrate",
           "dlbench.kinds.llm_inference", "dlbench.kinds.comms")


class CellKind:
    """The base of a cell kind; subclasses set the class attributes and override what
    differs."""

    name: str = ""
    result_kind: str = ""  # the result document's kind (result.KINDS)
    id_axes: tuple[str, ...] = ()  # the readable part of a cell id, in this order

    def id_part(self, axis: str, value: Any, params: Mapping[str, Any]) -> str | None:
        """How one axis reads in the id; None: the default slug."""
        return None

    def readable_id(self, params: Mapping[str, Any]) -> list[str]:
        parts = []
        for axis in self.id_axes:
            value = params.get(axis)
            part = self.id_part(axis, value, params)
            parts.append(slug(value) if part is None else part)
        return parts

    def check(self, params: Mapping[str, Any], datasets: Mapping[str, Any]) -> None:
        """Rules joining several axes; raise axes.AxisError(field, message)."""

    def command(self, params: Mapping[str, Any], output: Path, python: str,
                data_dir: str | None) -> list[str]:
        raise NotImplementedError

    def data_dir(self, params: Mapping[str, Any], datasets: Mapping[str, Any]) -> str:
        """The prepared dataset the cell's runner reads ('' for none)."""
        return ""

    def inputs(self, params: Mapping[str, Any], datasets: Mapping[str, Any]) -> list[str]:
        """Files or folders a cell reads: a change to one of them reruns the cell."""
        folder = self.data_dir(params, datasets)
        return [folder] if folder else []


def input_path_problem(path: str) -> str | None:
    """Why a file the config names for jobs to read (an op config, a dataset's tree) cannot
    be a job's input; None when it can. Snakemake reads {name} in an input's path as a
    wildcard to fill from the job's, with no escape, and would stop the whole run."""
    if "{" in path or "}" in path:
        shown = path if path.isprintable() else repr(path)  # one line, whatever it holds
        return (f"{shown}: a brace in the path of a file a job reads is a wildcard to "
                "Snakemake: rename the file or folder")
    return None


def slug(value: Any) -> str:
    try:
        return _slug_of_scalar(value)
    except TypeError:  # unhashable (a mapping): not cached
        return _slug(value)


# Cached: a grid's cells share few values, and a 10,000-cell study asks for 60,000 slugs.
# typed: True and 1 read differently ("yes", "1").
@functools.lru_cache(maxsize=4096, typed=True)
def _slug_of_scalar(value: Any) -> str:
    return _slug(value)


def _slug(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    text = str(value)
    if "/" in text or text.endswith(".json"):
        text = text.rsplit("/", 1)[-1].removesuffix(".json")
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-") or "x"


@functools.cache
def registry() -> dict[str, CellKind]:
    kinds = [importlib.import_module(module).KIND for module in BUILTIN]
    return {kind.name: kind for kind in kinds}


def of_result(result_kind: str) -> CellKind | None:
    """The cell kind whose runner writes results of ``result_kind`` (a model cell timing its
    input pipeline alone writes "loader"); None for a kind no cell writes."""
    wanted = "model" if result_kind == "loader" else result_kind
    return next((k for k in registry().values() if k.result_kind == wanted), None)


def names() -> list[str]:
    return list(registry())


def get(name: str) -> CellKind:
    return registry()[name]
