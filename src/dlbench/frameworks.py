"""Frameworks as plug-ins: what the driver knows of each framework, without importing it.

A framework is one folder (a package with a ``framework.py`` holding a ``Framework``, and
its runner, ``python -m <package>``), its environment (``envs/``) and its container
(``containers/``). Built-in frameworks are listed in ``BUILTIN``; any installed package
can add one through the entry-point group ``dlbench.frameworks`` (``name =
"package.framework:FRAMEWORK"``). Studies, the launcher, the workflow's rules (one rule
per framework), the profilers and the model registry all read this registry.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

BUILTIN = ("dlbench.pytorch.framework:FRAMEWORK", "dlbench.mxnet.framework:FRAMEWORK")
ENTRY_POINT_GROUP = "dlbench.frameworks"


@dataclass(frozen=True)
class Framework:
    name: str
    runner: str  # module run as ``python -m runner`` with the model flags of the axis table
    precisions: tuple[str, ...]
    # Cell kinds it runs (the ops kind is PARAM's, PyTorch only).
    kinds: tuple[str, ...] = ("model",)
    # The storage format of a real dataset its runner reads, given the cell's parameters:
    # "image_folder", "caffe_lmdb" or "recordio" (workflow/rules/datasets.smk makes them).
    dataset_format: Callable[[Mapping[str, Any]], str] | None = None
    # Conda environment file used under --use-conda, relative to the repository.
    conda_env: str | None = None
    # Where a config names none (frameworks.<name>.python, .container): the interpreter of
    # its environment, relative to the repository ('': the one running Snakemake), and its
    # image under --use-apptainer. A config given with --configfile replaces the
    # default config whole: its cells still find the environment `make` built.
    python: str = ""
    container: str = ""
    # (package, sub-folder) holding the framework's shared libraries, for hpcrun's
    # hpcstruct; ("", "") when it has none.
    library_package: tuple[str, str] = ("", "")
    # Builders this framework adds to the model registry: model name -> "module:function"
    # (a model of the registry), and models only this framework has (models.ModelSpec).
    models: Mapping[str, str] = field(default_factory=dict)
    new_models: tuple[Any, ...] = ()
    description: str = ""


class UnknownFramework(KeyError):
    pass


def _load(spec: str) -> Framework:
    module_name, _, attr = spec.partition(":")
    value = getattr(importlib.import_module(module_name), attr or "FRAMEWORK")
    if not isinstance(value, Framework):
        raise TypeError(f"{spec} is not a dlbench.frameworks.Framework")
    return value


@functools.cache
def registry() -> dict[str, Framework]:
    """Name -> framework: the built-in ones, then those installed packages add."""
    found = [_load(spec) for spec in BUILTIN]
    for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
        found.append(_load(entry.value))
    out: dict[str, Framework] = {}
    for fw in found:
        out.setdefault(fw.name, fw)  # a built-in name cannot be taken over
    return out


def names() -> list[str]:
    return list(registry())


def get(name: str) -> Framework:
    try:
        return registry()[name]
    except KeyError:
        raise UnknownFramework(f"unknown framework {name!r} (valid: {', '.join(names())})") \
            from None
