"""The ``dlbench`` console script: ``dlbench <command> ...``, one entry per subcommand.

A subcommand is a module with ``main(argv, prog) -> int`` (its own argparse parser). The
module is imported only when its command is run, so that ``dlbench --help`` and a light
command do not pay for another's imports (pandas, Altair). Adding a command is one entry
in ``COMMANDS``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import NamedTuple


class Command(NamedTuple):
    name: str
    module: str  # has main(argv: list[str], prog: str) -> int
    help: str


COMMANDS: tuple[Command, ...] = (
    Command("compare", "dlbench.compare.__main__",
            "compare two runs of a study (two tables, results folders or system labels): "
            "ratios with confidence intervals, faster/slower/same per cell"),
    Command("list", "dlbench.listing",
            "what a config expands to (models, studies, cells) and how much of it has run "
            "on each system"),
    Command("report", "dlbench.report.__main__",
            "render a results table (results/benchmarks.parquet) as the offline HTML report "
            "with PNG and SVG charts"),
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dlbench",
                                     description="Benchmarks of deep-learning frameworks.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        # No arguments here: everything after the command's name is its module's to parse.
        commands.add_parser(command.name, help=command.help, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    args, rest = build_parser().parse_known_args(sys.argv[1:] if argv is None else argv)
    command = next(c for c in COMMANDS if c.name == args.command)
    return importlib.import_module(command.module).main(rest, prog=f"dlbench {command.name}")


if __name__ == "__main__":
    sys.exit(main())
