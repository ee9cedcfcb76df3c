"""Command-line flags shared by the model runners, spelled as DLBS spells them.

DLBS passes booleans as ``--flag=true``/``--flag false``; a bare ``--flag`` also means
true. Every runner also takes ``--output`` (result JSON), ``--model_opts`` (JSON) and the
cell's study/id when the workflow launches it.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from dlbench.study import PRECISION_ALIASES

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def str2bool(text: str | bool) -> bool:
    if isinstance(text, bool):
        return text
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text) if text else {}
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc.msg})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def add_bool(parser: argparse.ArgumentParser, name: str, default: bool, help_text: str) -> None:
    parser.add_argument(name, type=str2bool, nargs="?", const=True, default=default,
                        metavar="true|false", help=f"{help_text} (default: {str(default).lower()})")


def model_runner_parser(prog: str, framework: str, dtypes: list[str]) -> argparse.ArgumentParser:
    """The flags every model runner shares (seeds 000 and 002)."""
    p = argparse.ArgumentParser(prog=prog, description=f"Benchmark one {framework} model cell.")
    p.add_argument("--model", required=True, help="model name from the registry")
    add_bool(p, "--forward_only", False, "benchmark inference instead of training")
    p.add_argument("--batch_size", type=int, default=32, help="per-device batch size")
    p.add_argument("--num_batches", type=int, default=100, help="measured iterations")
    p.add_argument("--num_warmup_batches", type=int, default=10, help="untimed warmup iterations")
    p.add_argument("--num_gpus", type=int, default=1,
                   help="devices (on --device cpu: data-parallel processes)")
    p.add_argument("--device", choices=["cpu", "gpu"], default="gpu")
    p.add_argument("--dtype", default="float32", choices=dtypes, help="precision")
    p.add_argument("--data_dir", default="", help="dataset path; empty means synthetic data")
    p.add_argument("--data_name", default="", help="dataset name recorded in the result")
    p.add_argument("--model_opts", type=json_object, default={}, help="model options as JSON")
    p.add_argument("--output", default="", help="write the result JSON here")
    p.add_argument("--study", default=None, help="study name recorded in the result")
    p.add_argument("--cell_id", default=None, help="cell id recorded in the result")
    return p


def precision(dtype: str) -> str:
    return PRECISION_ALIASES.get(dtype, dtype)


def check_positive(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    for name, minimum in (("batch_size", 1), ("num_batches", 1), ("num_warmup_batches", 0),
                          ("num_gpus", 1)):
        if getattr(args, name) < minimum:
            parser.error(f"--{name} must be >= {minimum}, got {getattr(args, name)}")
