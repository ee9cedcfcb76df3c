"""Command-line flags shared by the model runners, spelled as DLBS spells them.

DLBS passes booleans as ``--flag=true``/``--flag false``; a bare ``--flag`` also means
true. Every runner also takes ``--output`` (result JSON), ``--model_opts`` (JSON) and the
cell's study/id when the workflow launches it.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

# DLBS's own parsers take "t" too (mxnet_benchmarks' str2bool: true, on, t, 1).
_TRUE = {"true", "t", "1", "yes", "on"}
_FALSE = {"false", "f", "0", "no", "off"}


def str2bool(text: str | bool) -> bool:
    if isinstance(text, bool):
        return text
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: a whole number of ``minimum`` or more."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(f"must be a whole number >= {minimum}, got {text!r}")
        return value
    parse.__name__ = f"at_least_{minimum}"  # argparse names the type in some errors
    return parse


def above_zero(text: str) -> float:
    """An argparse type: a finite number above 0 (seconds, milliseconds, a budget)."""
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}")
    return value


def whole_numbers(minimum: int) -> Callable[[str], tuple[int, ...]]:
    """An argparse type: comma-separated whole numbers of ``minimum`` or more."""
    def parse(text: str) -> tuple[int, ...]:
        try:
            values = tuple(int(v) for v in text.split(","))
        except ValueError:
            values = ()
        if not values or min(values) < minimum:
            raise argparse.ArgumentTypeError(
                f"must be comma-separated whole numbers >= {minimum}, got {text!r}")
        return values
    parse.__name__ = f"whole_numbers_{minimum}"
    return parse


def listed_numbers_problem(text: str, noun: str, unit: str, example: str,
                           most: int) -> str | None:
    """Why ``text``, whole numbers above 0 separated by commas (each a ``noun``: "message
    size", in ``unit``: "bytes"), cannot be used, or more than ``most`` of them; None
    when it can (or is empty: the default instead). A config's one-line error."""
    if not text:
        return None
    items = [item.strip() for item in text.split(",")]
    bad = next((item for item in items if not item.isdigit() or int(item) == 0), None)
    if bad is not None:
        return (f"{bad!r} is no {noun} (whole {unit} above 0, separated by commas: "
                f"'{example}')")
    if len(items) > most:
        return f"{len(items):,} {noun}s (at most {most:,})"
    return None


def result_path(text: str) -> str:
    """A runner's ``--output``: a file that can be written, checked before anything runs
    (a measurement would otherwise be lost at the end). Its folders are made when missing,
    as the workflow's are."""
    if not text:
        return text
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder: give the result file's path")
    _check_writable(path.parent)
    return text


def output_folder(text: str) -> str:
    """A command's output folder (made when missing): not a file, and writable."""
    _check_writable(Path(text))
    return text


def _check_writable(folder: Path) -> None:
    """Raises argparse.ArgumentTypeError naming the first path in the way of making files
    in ``folder`` (or in the folders still to make there)."""
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(f"{folder} is not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"cannot write in {folder}")


def json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text) if text else {}
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc.msg})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def add_bool(parser: argparse.ArgumentParser, name: str, default: bool, help_text: str,
             dest: str | None = None) -> None:
    kw = {"dest": dest} if dest else {}
    parser.add_argument(name, type=str2bool, nargs="?", const=True, default=default,
                        metavar="true|false", help=f"{help_text} (default: {str(default).lower()})",
                        **kw)


def model_runner_parser(prog: str, framework: str) -> argparse.ArgumentParser:
    """The flags of a model runner (seeds 000 and 002): the axis flags the table gives this
    framework's runner, and the ones every runner takes besides."""
    from dlbench import axes

    p = argparse.ArgumentParser(prog=prog, description=f"Benchmark one {framework} model cell.")
    axes.add_flags(p, framework, framework)
    p.add_argument("--data_dir", default="", help="dataset path; empty means synthetic data")
    p.add_argument("--output", default="", type=result_path,
                   help="write the result JSON here")
    p.add_argument("--study", default=None, help="study name recorded in the result")
    p.add_argument("--cell_id", default=None, help="cell id recorded in the result")
    return p


def precision(dtype: str) -> str:
    from dlbench import axes

    return axes.get("precision").normalise(dtype)


def check_minimums(parser: argparse.ArgumentParser, args: argparse.Namespace,
                   runner: str) -> None:
    """The table's lower bounds of the runner's integer flags, as argparse errors (after a
    model runner's DLBS CPU spelling, ``dlbs_cpu_devices``)."""
    from dlbench import axes

    dlbs_cpu_devices(parser, args)
    for axis in axes.TABLE:
        flag = axis.flag_for(runner)
        if flag is None or axis.minimum is None or not hasattr(args, flag.attr):
            continue
        value = getattr(args, flag.attr)
        if value < axis.minimum:
            parser.error(f"{flag.option} must be >= {axis.minimum}, got {value}")


def dlbs_cpu_devices(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """A model runner's ``--num_gpus=0 --device=cpu`` as one device.

    DLBS passes ``--num_gpus=${exp.num_local_gpus}``, which is 0 when an experiment lists
    no GPUs, and its benchmarks then run one CPU device (their effective batch counts one
    device on a CPU). So that DLBS's command line for a CPU run works as it is, 0 on a CPU
    is the cell of one device, recorded as ``num_gpus`` 1: the same cell, and cell id, as
    ``--num_gpus=1 --device=cpu``. On a GPU, 0 devices cannot run. Only runners with
    ``--model`` (DLBS's); the collectives runner's ``--num_gpus`` counts processes.
    """
    if getattr(args, "num_gpus", None) != 0 or not hasattr(args, "model"):
        return
    device = getattr(args, "device", "cpu")
    if device != "cpu":
        parser.error(f"--num_gpus must be >= 1 with --device {device}, got 0 "
                     "(0 is DLBS's CPU run: give --device cpu)")
    args.num_gpus = 1


def check_cell(parser: argparse.ArgumentParser, kind: str, runner: str,
               cell: dict[str, Any]) -> None:
    """The study's checks of a cell (its axes' values, then its kind's: the model, its
    options, the values a device lacks) as one argparse error naming the runner's flag, so
    that a runner used on its own refuses what a study would, before anything runs. A
    dataset the runner is given by path is taken as known."""
    from dlbench import axes, kinds

    data = cell.get("data")
    datasets = {data: {}} if data and data != "synthetic" else {}
    try:
        axes.check(kind, cell)
        kinds.get(kind).check(cell, datasets)
    except axes.AxisError as exc:
        known = {a.name for a in axes.table()}
        flag = axes.get(exc.field).flag_for(runner) if exc.field in known else None
        parser.error(f"{flag.option if flag else exc.field}: {exc}")
