"""dlbench report results/benchmarks.parquet [--outdir DIR]
    [--profiles_dir results/profiles]   (also python -m dlbench.report ...)

The workflow's report rule renders the same; this renders a table by hand: one copied
from a cluster, or the workflow's again into another folder. The folder is by default
beside the table and named after it (cluster-a.parquet: cluster-a-report/), never the
workflow's results/report, which its next run would replace."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dlbench.cli import output_folder
from dlbench.report import ReportError, WriteError, render

PROG = "python -m dlbench.report"


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Render the aggregate table as an offline HTML report with PNG/SVG charts. "
                    "Exit 2 when the table cannot be read or the report cannot be written "
                    "(a full disk, or a folder holding files a report did not write).")
    parser.add_argument("parquet", help="aggregate Parquet written by dlbench.aggregate")
    parser.add_argument("--outdir", default=None, type=output_folder,
                        help="folder for index.html and charts/ (default: beside the table, "
                             "named after it: PARQUET's name with -report for .parquet)")
    parser.add_argument("--profiles_dir", default=None,
                        help="the profiles' folder (results/profiles) for the Profiles section")
    parser.add_argument("--baseline_system", default=None,
                        help="the system the others are compared with (default: the one with "
                             "the most model cells)")
    args = parser.parse_args(argv)
    if args.outdir is None:
        table = Path(args.parquet)
        try:
            args.outdir = output_folder(str(table.with_name(f"{table.stem}-report")))
        except argparse.ArgumentTypeError as exc:
            parser.error(f"argument --outdir: {exc}")
    if args.profiles_dir is not None and not Path(args.profiles_dir).is_dir():
        # a mistyped folder would read as "no profiles": said, the report made without
        print(f"{prog}: warning: --profiles_dir {args.profiles_dir}: no such folder; the "
              "report has no Profiles section", file=sys.stderr)
    try:
        files = render(args.parquet, args.outdir, profiles_dir=args.profiles_dir,
                       baseline_system=args.baseline_system)
    except ReportError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    except WriteError as exc:  # a full disk: the file, and the previous report is kept
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    for path in files:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
