"""NCCL settings of a cell (the ``nccl_env`` axis): ``NAME=VALUE`` pairs separated by
spaces, e.g. ``"NCCL_ALGO=Tree NCCL_PROTO=Simple"``, set in each of the cell's processes
before its process group starts, so that a study can sweep them (Ring against Tree, one
protocol against another) like any other axis. Framework-free: the driver checks them,
the runners apply them.

Only NCCL's own variables are taken, and values only of the characters NCCL's settings
use: a study cannot set arbitrary environment variables (``LD_PRELOAD``, ``PATH``) of the
processes it starts. Nor the NCCL variables that do what those would: load a library
(``NCCL_NET_PLUGIN`` and the other plug-ins, ``NCCL_IBVERBS_LIB``, which NCCL opens in
place of libibverbs), write a file (``NCCL_DEBUG_FILE``, the topology and graph dumps) or
read settings from one (``NCCL_CONF_FILE``, which may name a plug-in). NCCL_TOPO_FILE and
NCCL_GRAPH_FILE, which describe a machine NCCL cannot see (a VM), are read as data and are
the only settings whose value may be a path: a variable a later NCCL adds to name a
library is refused by its value's ``/`` where its name is not yet known here.
"""

from __future__ import annotations

import os
import re

_NAME = re.compile(r"NCCL_[A-Z0-9_]+")
# Letters, digits and what NCCL's values hold: lists (,), ranges and interfaces (^eth,
# =eth0 for an exact name, mlx5_0:1), sizes (4M), paths (/tmp/nccl.topo.xml), address
# ranges (192.168.0.0/16).
_VALUE = re.compile(r"=?[A-Za-z0-9_.,:/^+-]+")
# Address ranges in CIDR form, one or a list (NCCL_IB_ADDR_RANGE): a '/' that is no path.
_CIDRS = re.compile(r"[0-9A-Fa-f.:]+/\d{1,3}(,[0-9A-Fa-f.:]+/\d{1,3})*")
# Names that load code or write files (see the module's docstring).
_REFUSED = re.compile(r"NCCL_\w*_PLUGIN|NCCL_\w*_LIB|NCCL_\w*DUMP\w*|NCCL_DEBUG_FILE|"
                      r"NCCL_CONF_FILE")
# The files NCCL reads as data: the only values that may be a path.
_PATHS = frozenset({"NCCL_TOPO_FILE", "NCCL_GRAPH_FILE"})


def parse(text: str) -> dict[str, str]:
    """The settings in ``text`` (empty: none). Raises ValueError naming what is wrong."""
    settings: dict[str, str] = {}
    for item in text.split():
        name, sep, value = item.partition("=")
        if not sep or not _NAME.fullmatch(name):
            raise ValueError(f"{item!r} is no NCCL_<NAME>=<value> setting")
        if _REFUSED.fullmatch(name):
            raise ValueError(f"{name} is not taken: it loads a library or names a file NCCL "
                             "writes or reads its settings from")
        if not _VALUE.fullmatch(value):
            raise ValueError(f"{name}'s value {value!r} holds a character NCCL's settings "
                             "do not use")
        if "/" in value and name not in _PATHS and not _CIDRS.fullmatch(value):
            raise ValueError(f"{name}'s value {value!r} is a path, which only "
                             f"{' and '.join(sorted(_PATHS))} may be (a path elsewhere may "
                             "name a library NCCL loads)")
        if name in settings:
            raise ValueError(f"{name} is set twice")
        settings[name] = value
    return settings


def problem(text: str) -> str | None:
    """Why ``text`` is no valid setting list; None when it is (the axis's check)."""
    try:
        parse(text)
    except ValueError as exc:
        return str(exc)
    return None


def current() -> dict[str, str]:
    """The NCCL settings of this process's environment, by name (what a result records)."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")}


def apply(text: str | None) -> dict[str, str]:
    """Set the settings in this process's environment (before NCCL reads it) and return
    them."""
    settings = parse(text or "")
    os.environ.update(settings)
    return settings
