"""The one result document every runner writes (schema: schemas/result.schema.json).

A result file describes one cell: its identity (``cell``), its outcome (``status``), the
environment it ran in, and a list of ``measurements``. A model cell has one measurement;
an operator cell has one per operator input and pass (forward, backward). A failed cell
has none, so it still becomes a row in the aggregate table.
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import os
from collections.abc import Sequence
from importlib import resources
from typing import Any

from dlbench import stats
from dlbench.atomic import write_text as write_atomic  # the name others import it by

SCHEMA_VERSION = 1


def now_iso(timespec: str = "milliseconds") -> str:
    """The current time in UTC, ISO 8601 with its offset: the one clock of every record."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec=timespec)


def load_schema() -> dict[str, Any]:
    text = resources.files("dlbench").joinpath("schemas/result.schema.json").read_text()
    return json.loads(text)


# The schema's lists, named once there: a new result kind or pass is one edit of the schema.
_SCHEMA = load_schema()
STATUSES = tuple(_SCHEMA["properties"]["status"]["enum"])
KINDS = tuple(_SCHEMA["properties"]["kind"]["enum"])
PASSES = tuple(_SCHEMA["$defs"]["measurement"]["properties"]["pass"]["enum"])


def measurement(
    *,
    name: str,
    pass_: str,
    times_s: Sequence[float],
    items_per_iteration: float,
    throughput_unit: str = "samples/s",
    op_name: str | None = None,
    parameters: int | None = None,
    flops_per_iteration: float | None = None,
    bytes_per_iteration: float | None = None,
    data_wait_s: float | None = None,
    compute_s: float | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Build a measurement from raw per-iteration times; derived figures use the median."""
    if pass_ not in PASSES:
        raise ValueError(f"pass must be one of {PASSES}, got {pass_!r}")
    summary = stats.summarize(times_s)
    median = summary["median"]
    return {
        "name": name,
        "op_name": op_name,
        "pass": pass_,
        "iterations": len(times_s),
        "items_per_iteration": items_per_iteration,
        "time_s": summary,
        "times_s": [float(t) for t in times_s],
        "throughput": stats.throughput(items_per_iteration, median),
        "throughput_unit": throughput_unit,
        "parameters": parameters,
        "flops_per_iteration": flops_per_iteration,
        "tflops": flops_per_iteration / median / 1e12 if flops_per_iteration else None,
        "bytes_per_iteration": bytes_per_iteration,
        "gbps": bytes_per_iteration / median / 1e9 if bytes_per_iteration else None,
        "data_wait_s": data_wait_s,
        "compute_s": compute_s,
        "extra": extra or {},
    }


def new_result(
    *,
    kind: str,
    cell: dict[str, Any],
    study: str | None = None,
    cell_id: str | None = None,
) -> dict[str, Any]:
    """An empty result in status ``failed``: a runner fills it in as it goes, so a crash
    at any point still leaves an honest record."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": kind,
        "study": study,
        "cell_id": cell_id,
        "cell": dict(cell),
        "status": "failed",
        "error": None,
        "started_at": now_iso(),
        "finished_at": None,
        "wall_time_s": None,
        "environment": {},
        "measurements": [],
        "extra": {},
    }


def finish(result: dict[str, Any], status: str, error: str | None = None) -> dict[str, Any]:
    if status not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
    result["status"] = status
    result["error"] = error
    result["finished_at"] = now_iso()
    return result


@functools.cache
def _validator() -> Any:
    # Built once: jsonschema.validate checks the schema itself on every call (~30 ms).
    import jsonschema

    schema = _SCHEMA
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def validate(result: dict[str, Any]) -> None:
    """Raise ValueError with a one-line message if ``result`` breaks the schema."""
    import jsonschema

    error = jsonschema.exceptions.best_match(_validator().iter_errors(result))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "<root>"
        raise ValueError(f"result field {where}: {error.message}")


def write(result: dict[str, Any], path: str | os.PathLike[str]) -> None:
    validate(result)
    write_atomic(path, json.dumps(result, indent=1, sort_keys=False, allow_nan=False) + "\n")


def json_problem(exc: json.JSONDecodeError) -> str:
    """Where and why text is not JSON, in words: "Extra data at line 2, column 1". Some of
    json's messages end in "at" themselves ("Unterminated string starting at")."""
    at = " " if exc.msg.endswith(" at") else " at "
    return f"{exc.msg}{at}line {exc.lineno}, column {exc.colno}"


def loads(text: str | bytes, where: str | os.PathLike[str]) -> dict[str, Any]:
    """A result document from its text; ValueError (a UnicodeDecodeError for bytes that
    are not UTF-8) naming ``where`` when it is not one."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}: not a JSON result file ({json_problem(exc)})") from None
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"{where}: not a dlbench result of schema version {SCHEMA_VERSION}")
    return data


def read(path: str | os.PathLike[str]) -> dict[str, Any]:
    with open(path) as handle:
        return loads(handle.read(), path)
