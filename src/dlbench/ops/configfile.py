"""Reading an op config file: whatever the file holds, either an object of
``operator name: spec`` or a ``CellError`` of one line that names the file.

The file must be UTF-8 text (a byte-order mark is allowed) holding one JSON object with
at least one operator, no key twice in one object (JSON would silently keep the last),
at most ``MAX_BYTES`` and nested at most ``MAX_DEPTH`` levels deep (PARAM's configs
need about 12; deeper ones would only exhaust the recursion of the code that walks
them). What each operator's spec holds is checked by the runner, operator by operator,
and, as far as it can be without torch, before any job (``precheck``).

This module imports no framework, so that the driver may use it too.
"""

from __future__ import annotations

import codecs
import json
import os
import sys
from typing import Any

from dlbench.cellrun import CellError
from dlbench.result import json_problem

MAX_BYTES = 64 * 1024 * 1024
MAX_DEPTH = 64


def shown(text: Any) -> str:
    """``text`` as one line of printable characters: anything else escaped as in a
    Python literal (a newline in a name or path becomes ``\\n``)."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def json_type(value: Any) -> str:
    """The JSON name of a parsed value's type, with its article."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "null" if value is None else type(value).__name__


class _Duplicates:
    """An ``object_pairs_hook`` that builds dicts as json does and notes each key given
    twice in one object, with the object it belongs to."""

    def __init__(self) -> None:
        self.found: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for key, value in pairs:
            if key in result:
                self.found.append((key, result))
            result[key] = value
        return result


def depth(value: Any, limit: int = MAX_DEPTH) -> int:
    """How many objects and arrays deep ``value`` nests (a scalar is 0), counted without
    recursion and only up to ``limit + 1``."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if not isinstance(item, dict | list):
            continue
        deepest = max(deepest, level)
        if deepest > limit:
            break
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, level + 1) for child in children)
    return deepest


def _read(path: str | os.PathLike[str], name: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise CellError(f"config {name}: cannot read ({exc.strerror or exc})") from None
    if len(data) > MAX_BYTES:
        raise CellError(f"config {name}: larger than {MAX_BYTES // (1024 * 1024)} MiB, "
                        "not an op config")
    return data


def _parse(data: bytes, name: str, hook: _Duplicates) -> Any:
    bom = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        text = data[bom:].decode("utf-8")
    except UnicodeDecodeError as exc:
        offset = bom + exc.start
        raise CellError(f"config {name}: not UTF-8 text, so not JSON (byte "
                        f"0x{data[offset]:02x} at offset {offset})") from None
    if not text.strip():
        raise CellError(f"config {name}: empty, not JSON (expected an object of "
                        "operator name: spec)")
    try:
        return json.loads(text, object_pairs_hook=hook)
    except json.JSONDecodeError as exc:
        raise CellError(f"config {name}: not JSON ({json_problem(exc)})") from None
    except RecursionError:
        raise CellError(f"config {name}: nested more than {MAX_DEPTH} levels deep, "
                        "not an op config") from None
    except ValueError as exc:  # a number longer than Python converts (int_max_str_digits)
        if "digits" in str(exc):
            limit = sys.get_int_max_str_digits()
            raise CellError(f"config {name}: a number of more than {limit} digits") from None
        raise CellError(f"config {name}: not JSON ({shown(exc)})") from None


def load(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The operators of the op config at ``path``, in file order; ``CellError`` (one
    line naming the file) when it cannot be one."""
    name = shown(os.fspath(path))
    duplicates = _Duplicates()
    config = _parse(_read(path, name), name, duplicates)
    if duplicates.found:
        key, owner = duplicates.found[0]
        what = "operator" if owner is config else "key"
        raise CellError(f"config {name}: {what} {key!r} is given twice in one object "
                        "(JSON would keep only the last)")
    if not isinstance(config, dict):
        raise CellError(f"config {name}: {json_type(config)} at the top level, not an "
                        "object of operator name: spec")
    if not config:
        raise CellError(f"config {name}: holds no operators (an empty JSON object)")
    if depth(config) > MAX_DEPTH:
        raise CellError(f"config {name}: nested more than {MAX_DEPTH} levels deep, "
                        "not an op config")
    return config
