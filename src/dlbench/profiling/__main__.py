"""``python -m dlbench.profiling``: run a profile job, or turn a profile's exports into tables.

    python -m dlbench.profiling run --tool torch --cell '<cell JSON>' --out_dir DIR \\
        [--python PY] [--data_dir D] [--settings '<JSON>'] [--record-failure]
    python -m dlbench.profiling capture ...   (the same options: the profiled run only)
    python -m dlbench.profiling finish --tool torch --out_dir DIR [--record-failure]
    python -m dlbench.profiling tables --tool torch DIR

``run`` = ``capture`` (in the framework's environment or container) + ``finish`` (tables
and profile.json, where pyarrow is); the workflow runs the two halves as two jobs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dlbench import cli, subproc
from dlbench.profiling import registry, run
from dlbench.profiling.base import Profiler
from dlbench.profiling.config import ProfilingConfigError, settings


def _json(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc.msg})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value



def _cell_problem(cell: dict) -> str | None:
    """Why ``cell`` is no cell as the workflow passes it (study.Cell.to_json), or None."""
    missing = [key for key in ("study", "cell_id", "kind", "params") if key not in cell]
    if missing:
        return f"no {', '.join(missing)} (a cell as study.Cell.to_json writes it)"
    if not isinstance(cell["params"], dict):
        return "params must be a JSON object"
    return None


def _no_tables(tool: str, folder: Path) -> str:
    """Why ``tables`` made none: the tool has no tables, or the folder no export of it."""
    profiler = registry.get(tool)
    if type(profiler).convert is Profiler.convert and profiler.opens_in:
        what, viewer = profiler.opens_in
        return f"a profile of this tool has no tables ({what}, for {viewer})"
    return f"no export to make a table of in {folder}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dlbench.profiling",
                                     description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    record_help = ("on failure write the one-line reason into the folder's record (status "
                   "failed) and exit 0, so that the report shows it (workflow use)")
    for name, what in (("run", "profile one cell with one tool: capture, then finish"),
                       ("capture", "the profiled run alone, writing DIR/capture.json")):
        job = sub.add_parser(name, help=what)
        job.add_argument("--tool", required=True, choices=registry.names())
        job.add_argument("--cell", required=True, type=_json,
                         help="the cell (study.Cell.to_json)")
        job.add_argument("--out_dir", required=True, type=Path, help="the profile's folder")
        job.add_argument("--python", default=sys.executable,
                         help="the framework's interpreter")
        job.add_argument("--data_dir", default="", help="prepared dataset of the cell")
        job.add_argument("--settings", type=_json, default={},
                         help="the tool's settings as JSON (profiling.tools.<tool>)")
        job.add_argument("--record-failure", action="store_true", help=record_help)
        job.add_argument("--timeout_s", type=cli.above_zero, default=None,
                         help="stop each profiled run after this many seconds (the workflow "
                              "gives the study's timeout_s)")
    done = sub.add_parser("finish", help="tables and DIR/profile.json of a captured profile")
    done.add_argument("--tool", required=True, choices=registry.names())
    done.add_argument("--out_dir", required=True, type=Path, help="the profile's folder")
    done.add_argument("--record-failure", action="store_true", help=record_help)
    conv = sub.add_parser("tables", help="convert a profile folder's exports to Parquet")
    conv.add_argument("--tool", required=True, choices=registry.names())
    conv.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    try:
        tool_settings = settings(args.tool, getattr(args, "settings", {}))
    except ProfilingConfigError as exc:
        parser.error(str(exc))
    if args.command == "tables":
        from dlbench.profiling import tables  # pyarrow: the driver's, not the framework's

        try:
            made = tables.convert(args.tool, args.folder, tool_settings)
        except tables.TableError as exc:
            print(f"{args.tool}: {exc}", file=sys.stderr)
            return 1
        if not made:  # as a missing export of ncu or torch: one line, not an empty list
            print(f"{args.tool}: {_no_tables(args.tool, args.folder)}", file=sys.stderr)
            return 1
        print("\n".join(str(args.folder / name) for name in made.values()))
        return 0
    if args.command == "finish":
        return run.main_finish(args.tool, args.out_dir, record_failure=args.record_failure)
    problem = _cell_problem(args.cell)
    if problem:
        parser.error(f"--cell: {problem}")
    job_main = run.main if args.command == "run" else run.main_capture
    return job_main(args.tool, args.cell, args.out_dir, args.python or sys.executable,
                    tool_settings, args.data_dir or None, record_failure=args.record_failure,
                    timeout_s=args.timeout_s)


if __name__ == "__main__":
    subproc.adopt_orphans()  # the profiled runner's orphans end with it (dlbench.subproc)
    sys.exit(main())
