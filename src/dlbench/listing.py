"""``dlbench list models|studies|cells [--configfile F]``: what a config expands to and how
much of it has run, per system, before anyone starts a long run.

- ``models``: the model registry (dlbench.models): each model, the frameworks that have it,
  its input and its options.
- ``studies``: each study of the config: its kind, cells, repeats, and per system the runs
  done (ok), failed (failed, oom, or a result that cannot be read), skipped (its framework
  not installed there: not a failure) and missing, and the seconds its recorded runs took
  (``<system> s``: each cell's process, start-up included).
- ``cells``: one line per cell (and repeat): its study, id, the status of its result on
  each system (``-`` where it has none) and the seconds it took there.

The systems are the config's label (or this host's) and every other system that has a
``results/<system>/`` folder. The config is checked as the workflow checks it: a problem
is one line naming the study and field, exit status 2. Nothing is run or written.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from dlbench import config_schema, models, study, systems, workflow_support

PROG = "dlbench list"
DEFAULT_CONFIG = Path("config/config.yaml")
SCHEMA = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml"
# A run out of memory failed at its size; a skipped one could not run there at all (its
# framework not installed), which is no failure of the cell, so it is counted apart.
FAILED = ("failed", "oom")
SKIPPED = "skipped"
MISSING = "-"


class ListError(ValueError):
    """A config that cannot be listed, in one line."""


def merge_config(config: dict[str, Any], overwrite: Mapping[str, Any]) -> None:
    """``overwrite`` merged into ``config`` in place as Snakemake merges each --configfile
    into the ones before it (snakemake.utils.update_config; a test holds them equal):
    mappings key by key, at every depth (a second file's study joins the first's
    studies), anything else replaced. Its own code, not Snakemake's function: importing
    snakemake takes about 0.1 s, more than half again what the listing's start-up takes."""

    def merge(config: Any, overwrite: Mapping[str, Any]) -> Any:
        for key, value in overwrite.items():
            if not isinstance(config, Mapping):  # a mapping over a value replaces it
                config = {}
            config[key] = merge(config.get(key, {}), value) if isinstance(value, Mapping) \
                else value
        return config

    merge(config, overwrite)


def yaml_problem(exc: Exception) -> str:
    """PyYAML's error in one line, with the line and column where it found it (its own
    first line is the context only: "while parsing a flow sequence")."""
    mark, problem = getattr(exc, "problem_mark", None), getattr(exc, "problem", None)
    if mark is None or not problem:
        return str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    return (f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
            + (f", {context}" if context else ""))


def load_config(paths: list[Path]) -> dict[str, Any]:
    """The configs merged as Snakemake merges several --configfile (``merge_config``)."""
    import yaml

    config: dict[str, Any] = {}
    for path in paths:
        try:
            value = yaml.safe_load(path.read_text())
        except OSError as exc:
            raise ListError(f"{path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:  # Latin-1, or UTF-16 as some shells redirect
            raise ListError(f"{path}: not UTF-8 text (byte {exc.start}); a config is YAML "
                            "in UTF-8") from None
        except yaml.YAMLError as exc:
            raise ListError(f"{path}: not YAML ({yaml_problem(exc)})") from None
        if not isinstance(value, dict):
            raise ListError(f"{path}: a config is a mapping with 'studies'")
        for line in config_schema.duplicate_keys(path):  # as the workflow warns
            print(f"dlbench config warning: {line}", file=sys.stderr)
        merge_config(config, value)
    return config


def expand(config: Mapping[str, Any]) -> tuple[list[study.Cell], dict[str, int]]:
    """Every cell and each study's repeats, checked as the workflow checks them."""
    try:
        if SCHEMA.is_file():  # a source checkout: the workflow's schema too
            config_schema.validate_config(config, SCHEMA)
        cells = workflow_support.expand_cells(config)
        return cells, workflow_support.run_settings(config).repeats
    except (workflow_support.WorkflowConfigError, study.ConfigError) as exc:
        raise ListError(str(exc)) from None


def system_labels(config: Mapping[str, Any], results: Path, chosen: str | None) -> list[str]:
    """This run's label first, then every other system with a folder under ``results``."""
    try:
        here = systems.check_label(chosen, "--system") if chosen else systems.label_of(config)
    except systems.SystemLabelError as exc:
        raise ListError(str(exc)) from None
    others = sorted({systems.system_of(p) for p in systems.result_files(results)} - {here, None})
    return [here, *others]


def check_results(results: Path) -> None:
    """A results folder that is a file is an error; one that does not exist is said in a
    warning (a mistyped path would otherwise read as nothing run yet), the cells listed
    as missing: before the first run there is none."""
    if results.exists() and not results.is_dir():
        raise ListError(f"--results {results}: not a folder")
    if not results.exists():
        print(f"{PROG} warning: --results {results}: no such folder; every cell is listed "
              "as missing", file=sys.stderr)


def cell_rows(cells: Iterable[study.Cell], repeats: Mapping[str, int], labels: list[str],
              results: Path) -> list[dict[str, Any]]:
    """One row per cell and repeat, with its status on each system."""
    rows = []
    for path, cell in workflow_support.result_paths(cells, labels[0], repeats).items():
        repeat = systems.repeat_of(path)
        row = {"study": cell.study, "kind": cell.kind, "cell_id": cell.id, "repeat": repeat}
        for label in labels:
            path = systems.result_path(label, cell.study, cell.id, results, repeat)
            status, seconds = workflow_support.recorded(path)
            row[label] = status or MISSING
            row[f"{label} s"] = round(seconds, 1) if seconds is not None else None
        rows.append(row)
    return rows


def study_rows(cells: list[study.Cell], repeats: Mapping[str, int], labels: list[str],
               rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per study: its cells and repeats, and per system runs done, failed, skipped and
    missing."""
    out = []
    for name in dict.fromkeys(cell.study for cell in cells):
        mine = [r for r in rows if r["study"] == name]
        row: dict[str, Any] = {"study": name, "kind": mine[0]["kind"],
                               "cells": sum(1 for c in cells if c.study == name),
                               "repeats": repeats.get(name, 1)}
        for label in labels:
            counts = Counter(r[label] for r in mine)
            row[f"{label} done"] = counts["ok"]
            row[f"{label} failed"] = sum(counts[s] for s in (*FAILED, workflow_support.UNREADABLE))
            row[f"{label} skipped"] = counts[SKIPPED]
            row[f"{label} missing"] = counts[MISSING]
            row[f"{label} s"] = round(sum(r[f"{label} s"] or 0.0 for r in mine))
        out.append(row)
    return out


def model_rows() -> list[dict[str, Any]]:
    return [{"model": spec.name, "frameworks": ", ".join(spec.frameworks),
             "input": f"{spec.input_kind} {'x'.join(str(n) for n in spec.input_shape)}",
             "description": spec.description,
             # last: the widest column, which would pad every description before it
             "options": ", ".join(f"{k}={v}" for k, v in spec.default_opts.items())}
            for spec in map(models.get, models.names())]  # with the plug-ins' models


def text_table(rows: list[dict[str, Any]]) -> list[str]:
    """Aligned columns: text left, numbers right."""
    if not rows:
        return []
    headers = list(rows[0])
    cells = [["" if r[h] is None else str(r[h]) for h in headers] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]
    numeric = [all(isinstance(r[h], int) for r in rows) for h in headers]

    def line(values: list[str]) -> str:
        return "  ".join(v.rjust(w) if n else v.ljust(w)
                         for v, w, n in zip(values, widths, numeric, strict=True)).rstrip()

    return [line(headers), line(["-" * w for w in widths]), *(line(c) for c in cells)]


def emit(rows: list[dict[str, Any]], fmt: str) -> None:
    if fmt == "json":
        print(json.dumps(rows, indent=1))
    elif fmt == "csv":
        if rows:
            writer = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]), lineterminator="\n")
            writer.writeheader()
            writer.writerows(rows)
    else:
        for line in text_table(rows):
            print(line)


WHAT = ("models", "studies", "cells")


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description="What a config expands to, and how much of it has run on each "
                               "system. Runs nothing.")
    # Optional here only so that "--configfile a.yaml studies" (Snakemake's order, whose
    # list takes the word as a file) is read as meant: ``parse`` requires it.
    parser.add_argument("what", choices=WHAT, nargs="?")
    # Snakemake's forms: --configfile a.yaml b.yaml, and the option given again.
    parser.add_argument("--configfile", "--configfiles", type=Path, action="extend", nargs="+",
                        default=None, metavar="FILE",
                        help=f"the config (default {DEFAULT_CONFIG}); several are merged as "
                             "Snakemake merges them, later ones over earlier ones")
    parser.add_argument("--system", default=None,
                        help="this run's system label (default: the config's, else this host's)")
    parser.add_argument("--results", type=Path, default=systems.RESULTS,
                        help="the results folder (default: %(default)s)")
    parser.add_argument("--format", choices=("text", "csv", "json"), default="text")
    return parser


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    if args.what == "models":
        return model_rows()
    # A label of digits (system: 2024) is its text, as in the workflow, schema or not.
    config = dict(config_schema.label_text(load_config(args.configfile or [DEFAULT_CONFIG])))
    cells, repeats = expand(config)
    check_results(args.results)
    labels = system_labels(config, args.results, args.system)
    rows = cell_rows(cells, repeats, labels, args.results)
    return study_rows(cells, repeats, labels, rows) if args.what == "studies" else rows


def parse(argv: list[str] | None, prog: str = PROG) -> argparse.Namespace:
    """The command line; WHAT given last, after the config files, is WHAT, not a file."""
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    if args.what is None and args.configfile and str(args.configfile[-1]) in WHAT:
        args.what = str(args.configfile.pop())
    if args.what is None:
        parser.error(f"say what to list: one of {', '.join(WHAT)}")
    if args.configfile == []:
        parser.error("argument --configfile: expected at least one file")
    return args


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    args = parse(argv, prog)
    try:
        rows = run(args)
    except ListError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    try:
        emit(rows, args.format)
    except BrokenPipeError:  # `dlbench list cells | head`: the reader has what it wanted
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (Python's own advice for this)
    return 0


if __name__ == "__main__":
    sys.exit(main())
