"""dlbench compare BASE NEW [--table TABLE] [--out DIR] [--threshold 0.05]
    [--single-run-threshold 0.25] [--fail-on regressed|slower|none] [--resamples 2000]
    [--seed 0]  (also: python -m dlbench.compare ...)

Exit status: 0 when nothing regressed, 1 when a cell is slower or a cell BASE measured
failed or ran out of memory in more of its runs in NEW than in BASE (``--fail-on slower``:
slower cells only; ``none``: never), so that a CI job can gate on it, 2 when the inputs
cannot be compared or the outputs cannot be written (one line on stderr naming the file or
field).
"""

from __future__ import annotations

import argparse
import os
import sys

from dlbench.cli import at_least, output_folder

PROG = "python -m dlbench.compare"
EXIT_SLOWER = 1
EXIT_BAD_INPUT = 2


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 0 and below 1, got {value}")
    return value


# Beyond this the bootstrap's arrays grow to gigabytes (10^8 resamples held 6.7 GB) for
# intervals no steadier than at 2,000.
MAX_RESAMPLES = 100_000


def _resamples(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 100 <= value <= MAX_RESAMPLES:
        raise argparse.ArgumentTypeError(
            f"must be between 100 and {MAX_RESAMPLES:,}, got {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The command's arguments (the heavy modules are imported only once they are parsed)."""
    parser.add_argument("base", metavar="BASE",
                        help="the reference: an aggregate Parquet, a results folder, or a system "
                             "label (read from results/<label>/, else from --table)")
    parser.add_argument("new", metavar="NEW", help="what is compared with BASE (the same kinds)")
    parser.add_argument("--table", default=None, metavar="TABLE",
                        help="BASE and NEW are values of the system column of this aggregate "
                             "Parquet or results folder (default for labels: results/<label>/ "
                             "where it exists, else results/benchmarks.parquet)")
    parser.add_argument("--out", default="results/compare", metavar="DIR", type=output_folder,
                        help="folder for compare.parquet/.csv/.md/.html (default: %(default)s)")
    parser.add_argument("--threshold", type=_fraction, default=0.05,
                        help="a change must exceed this fraction to be faster or slower "
                             "(default: %(default)s = 5 %%)")
    parser.add_argument("--single-run-threshold", type=_fraction, default=0.25,
                        help="the change a cell must exceed when a side ran once (no repeats): "
                             "one run's interval cannot see run-to-run variation (default: "
                             "%(default)s; measure yours with benchmarks/compare_honesty.py)")
    parser.add_argument("--fail-on", choices=("regressed", "slower", "none"),
                        default="regressed",
                        help="exit 1 when a cell is slower or a cell BASE measured failed or "
                             "ran out of memory in more of its runs in NEW than in BASE "
                             "(regressed, the default), when a cell is slower (slower), or "
                             "never (none)")
    parser.add_argument("--resamples", type=_resamples, default=2000,
                        help="bootstrap resamples (default: %(default)s)")
    parser.add_argument("--seed", type=at_least(0), default=0,
                        help="seed of the bootstrap (default: %(default)s)")


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Compare two runs of a benchmark study: throughput, latency, energy and "
                    "memory ratios NEW/BASE per cell with bootstrap confidence intervals, and a "
                    "verdict per cell (faster, slower, same). Exit 1 when a cell is slower or "
                    "a cell BASE measured failed in more of its runs in NEW than in BASE.")
    add_arguments(parser)
    return parser


def run(args: argparse.Namespace, prog: str = PROG) -> int:
    from dlbench.compare import InputError, Settings, compare
    from dlbench.compare.output import WriteError, console_summary, write_outputs

    settings = Settings(threshold=args.threshold, resamples=args.resamples, seed=args.seed,
                        single_run_threshold=args.single_run_threshold)
    if os.path.abspath(args.base) == os.path.abspath(args.new):
        # a typo in a CI script would pass for ever: every cell is the same as itself
        print(f"{prog}: warning: BASE and NEW are the same input ({args.base}): every cell "
              "is compared with itself", file=sys.stderr)
    try:
        comparison = compare(args.base, args.new, table=args.table, settings=settings)
        files = write_outputs(comparison, args.out)
    except (InputError, WriteError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as exc:  # noqa: BLE001 - a crash must not read as "slower" (exit 1)
        print(f"{prog}: could not compare ({type(exc).__name__}: {exc}); the inputs may hold "
              "values of a type their columns do not (a table written by other software?)",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    code = 0
    if (comparison.any_slower and args.fail_on != "none") or (
            comparison.newly_failed and args.fail_on == "regressed"):
        code = EXIT_SLOWER
    try:
        for line in console_summary(comparison):
            print(line)
        print(f"  wrote {', '.join(str(f) for f in files)}")
        if comparison.newly_failed:
            print(f"  newly failing: {comparison.newly_failed} cell"
                  f"{'s' if comparison.newly_failed != 1 else ''} measured in BASE failed or "
                  "ran out of memory in NEW (in more of its runs than in BASE; listed as not "
                  "compared)")
        sys.stdout.flush()
    except BrokenPipeError:  # | head: the verdict stands in the exit status
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return code


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    parser = build_parser(prog)
    return run(parser.parse_args(argv), prog)


if __name__ == "__main__":
    sys.exit(main())
