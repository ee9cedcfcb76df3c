"""The command line of ``python -m dlbench.comms``: its flags (the collective axes', from
dlbench.axes, and PARAM's comms.py spellings), PARAM's forms read as dlbench's
(``--mm-dim m n p``, comma lists of collectives and data types, ``--num-coll``,
``--pt2pt`` alone, ``--mode``), and every check of a run's flags, each refusal
argparse's one line naming the flag."""

from __future__ import annotations

import argparse
import itertools
import sys
from typing import Any

from dlbench import axes, cli, monitor
from dlbench.comms import sizes as S
from dlbench.comms.overlap import EMBEDDING, NO_KERNEL
from dlbench.comms.validation import ranks_problem

KIND = "comms"
# PARAM's --mode: the collectives alone, or overlapped with a compute kernel.
MODES = ("comms", "comms-compute")


# PARAM's --device names for a GPU (torch's ROCm builds drive AMD GPUs as "cuda" too).
GPU_DEVICES = ("cuda", "rocm")
# PARAM's --log levels.
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# PARAM's flags for connecting its processes (started by mpirun), which torchrun's
# rendezvous does here: taken, and said to be unused.
RENDEZVOUS = ("--master-ip", "--master-port")
# PARAM's comms.py defaults that differ here: (flag, its other spelling, attribute, PARAM's
# value as its --help gives it). A PARAM command line that leaves one out measures
# something else here, which ``defaults_unlike_params`` says.
PARAM_DEFAULTS = (("--e", "--end-size", "e", "64"), ("--n", "--num_iters", "n", "5"),
                  ("--z", "--blocking", "z", "0"), ("--window", None, "window", "100"))


class Parser(argparse.ArgumentParser):
    """Reads PARAM's ``--mm-dim m n p`` as ``--mm-shape`` (``params_mm_dim``) and its
    ``--device cuda`` as ``gpu`` (``params_device``) wherever the runner's flags are
    parsed."""

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        words = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(params_device(params_mm_dim(words)), namespace)


def params_device(argv: list[str]) -> list[str]:
    """PARAM's ``--device cuda`` (or ``rocm``) as dlbench's ``--device gpu``."""
    out = list(argv)
    for i, arg in enumerate(out):
        if arg == "--device" and i + 1 < len(out) and out[i + 1] in GPU_DEVICES:
            out[i + 1] = "gpu"
        elif arg.partition("=")[::2] in (("--device", d) for d in GPU_DEVICES):
            out[i] = "--device=gpu"
    return out


def parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="python -m dlbench.comms", allow_abbrev=False,
        description="Time one collective over a sweep of message sizes among --num_gpus "
                    "processes (PARAM's comms.py flags: --collective, --b, --e, --f, --w, "
                    "--n, --data-type, --c, --z, --sb, --ss, --root, --pt2pt, --src-ranks, "
                    "--dst-ranks, --window, --multi-comms, "
                    "--mode, --kernel, --num-compute, --mm-dim, --comp-data-type, --emb-dim, "
                    "--num-embs, --num-emb-tables-per-device, --batch-size, --bag-size, "
                    "--backend, --device cuda, --log; "
                    "--mm-dim's "
                    "two or three values are --mm-shape's; --collectives and --data-types take "
                    "PARAM's comma lists, each value in turn, printed, no result file).")
    axes.add_flags(p, KIND, "pytorch", kind=KIND)
    p.add_argument("--mode", choices=MODES,
                   help="PARAM's benchmark mode: comms-compute overlaps the collectives with "
                        "--kernel (gemm unless named), comms times them alone")
    p.add_argument("--num-coll", "--num-coll-per-iteration", type=int, default=1,
                   help="PARAM's collectives per iteration: more than 1 issues that many back "
                        "to back and waits for them once, which is --z 0 --window N here")
    monitor.add_arguments(p)  # the launcher's and the profile jobs' --monitor_interval_ms
    p.add_argument("--log", "--log-level", dest="log_level", choices=LOG_LEVELS,
                   help="PARAM's logging level (default INFO here; PARAM's is ERROR)")
    for flag in RENDEZVOUS:
        p.add_argument(flag, help="PARAM's (its processes' rendezvous): not used, torchrun's "
                                  "rendezvous connects the processes dlbench starts")
    p.add_argument("--nw-stack", choices=("pytorch-dist",), default="pytorch-dist",
                   help="PARAM's network stack: torch.distributed (the one offered)")
    p.add_argument("--tag", default="",
                   help="PARAM's: a word added to the name of every COMMS-RES line printed")
    p.add_argument("--output", type=cli.result_path, help="result JSON to write (rank 0)")
    p.add_argument("--study")
    p.add_argument("--cell_id")
    return p


def params_mm_dim(argv: list[str]) -> list[str]:
    """PARAM's ``--mm-dim m n p`` (or its other spelling, ``--comp-dim``) with two or three
    values (a GEMM's A[m,n] and B[n,p], the other kernels' m x n) as
    ``--mm-shape=m,n,p``; one value is ``--mm-dim``'s."""
    out, i = [], 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--comp-dim="):
            arg = "--mm-dim=" + arg.partition("=")[2]
        values = []
        if arg in ("--mm-dim", "--comp-dim"):
            arg = "--mm-dim"
            values = list(itertools.takewhile(str.isdigit, argv[i + 1:]))
        if len(values) > 1:
            out.append(f"--mm-shape={','.join(values)}")
            i += 1 + len(values)
        else:
            out.append(arg)
            i += 1
    return out


# PARAM's flags that take a comma list (one run measures each value in turn), and the
# flag of one value each run is given here.
LISTS = {"--collective": "--collective", "--collectives": "--collective",
         "--data-type": "--data-type", "--data-types": "--data-type"}
# What names one cell's result: a run of several collectives or types has no one cell.
ONE_CELL = ("--output", "--study", "--cell_id")


def given(argv: list[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in argv)


def defaults_unlike_params(args: argparse.Namespace, argv: list[str]) -> str | None:
    """The flags ``argv`` leaves at a default other than PARAM's (``--window`` only for
    point-to-point tests, PARAM's only windowed ones; ``--e`` only for a sweep of sizes),
    each with both values: "--e
    268435456 (PARAM's 64), --z 1 (PARAM's 0)"; and what a non-blocking collective or a
    pairwise test without rank lists does otherwise than PARAM."""
    point_to_point = args.collective == "pt2pt"
    # PARAM's window is its point-to-point tests' only; --e ends a sweep, which sizes given
    # by --ss, or an all_to_allv's blocks by --i or --o, replace
    applies = {"window": point_to_point, "z": not point_to_point,
               "e": not (args.ss or args.i or args.o)}
    parts = [f"{flag} {getattr(args, attr)} (PARAM's {theirs})"
             for flag, other, attr, theirs in PARAM_DEFAULTS
             if not given(argv, flag) and not (other and given(argv, other))
             and applies.get(attr, True) and str(getattr(args, attr)) != theirs]
    if not point_to_point and not args.z and not given(argv, "--window"):
        parts.append(f"--z 0 issues --window {args.window} collectives a timed iteration "
                     "(PARAM issues all --n of them, then waits once)")
    if point_to_point and args.pt2pt == "pairwise" and not (args.src_ranks or args.dst_ranks):
        parts.append("--pt2pt pairwise pairs every rank i of the first half with i + n/2, "
                     "all at once (PARAM's, without --src-ranks/--dst-ranks: rank 0 with 1)")
    return ", ".join(parts) or None


def unused_flags(args: argparse.Namespace, argv: list[str]) -> list[str]:
    """A line for each flag ``argv`` gives that this run takes no notice of: --window
    where each collective is waited for (--z 1), --root for a collective without one."""
    lines = []
    if given(argv, "--window") and args.collective != "pt2pt" and args.z:
        lines.append(f"--window {args.window} is not used: --z 1 waits for each collective "
                     "(a window is --z 0's, and the point-to-point tests')")
    if given(argv, "--root") and args.collective not in S.ROOTED:
        lines.append(f"--root {args.root} is not used: {args.collective} has no root")
    return lines


def pairs_error(exc: S.PairsError) -> str:
    """A pattern that cannot pair as argparse's line, naming the flag of its axis (a count
    of processes: both flags that make it)."""
    flag = axes.get(exc.field).flag_for(KIND)
    name = flag.option if flag else exc.field
    extra = " (--num_gpus x --num_nodes)" if exc.field == "num_gpus" else ""
    return f"{name}: {exc}{extra}"


def listed_runs(argv: list[str]) -> tuple[list[list[str]], int]:
    """PARAM's comma lists (``--collectives all_reduce,all_gather --data-types
    float32,bfloat16``) as one argument list per (data type, collective), in PARAM's order
    (each data type's collectives in turn), and how many collectives were listed. An
    argument list without lists is one run."""
    rest, values = [], {"--collective": [], "--data-type": []}
    i = 0
    while i < len(argv):
        name, eq, text = argv[i].partition("=")
        if name in LISTS and (eq or i + 1 < len(argv)):
            text = text if eq else argv[i + 1]
            # The last one wins; one naming no value ("", ",") goes to argparse as it is,
            # to be refused there, not dropped into a run of the default.
            values[LISTS[name]] = [v for v in text.split(",") if v] or [text]
            i += 1 if eq else 2
            continue
        rest.append(argv[i])
        i += 1
    dtypes = [f"--data-type={v}" for v in values["--data-type"]] or [None]
    collectives = [f"--collective={v}" for v in values["--collective"]] or [None]
    runs = [[*rest, *(a for a in (c, d) if a)] for d in dtypes for c in collectives]
    return runs, len(collectives)


def checked(p: argparse.ArgumentParser, argv: list[str]) -> tuple[argparse.Namespace,
                                                                     list[str]]:
    """The run's arguments, PARAM's spellings read; a bad one is argparse's one line."""
    args = p.parse_args(argv)
    args.collective = axes.get("collective").normalise(args.collective)  # PARAM's *_base
    if given(argv, "--pt2pt"):
        args.collective = "pt2pt"  # PARAM's --pt2pt alone selects the point-to-point tests
    if args.num_coll < 1:
        p.error(f"--num-coll must be >= 1, got {args.num_coll}")
    if args.num_coll > 1:  # PARAM's: N issued per iteration, then waited for once
        if given(argv, "--window"):
            p.error("--num-coll is --window's count here: give one of them")
        args.z, args.window = 0, args.num_coll
    if args.mode == "comms-compute" and args.kernel == NO_KERNEL:
        args.kernel = "gemm"  # PARAM's default kernel
    if args.mode == "comms" and args.kernel != NO_KERNEL:
        p.error(f"--kernel {args.kernel} computes beside the collectives: that is --mode "
                "comms-compute, not comms")
    world = args.num_gpus * args.num_nodes
    if args.multi_comms > 1 and (args.collective == "pt2pt" or args.collective in S.FAN):
        p.error(f"--multi-comms: {args.collective} names its own ranks; communicators split "
                "the ranks of the other collectives")
    problem = S.groups_problem(args.multi_comms, world)
    if problem:
        p.error(f"--multi-comms {args.multi_comms}: {problem} (--num_gpus x --num_nodes; "
                "--multi-comms must divide them)")
    ranks = world // max(1, args.multi_comms)  # the processes of one collective
    problem = S.root_problem(args.root, ranks)
    if args.collective in S.ROOTED and problem:
        p.error(f"--root {problem}")
    problem = ranks_problem(args.collective, args.data_type, ranks)
    if args.c and problem:
        p.error(f"--c {problem}")
    if args.collective == "pt2pt" and args.kernel != NO_KERNEL:
        p.error(f"--kernel {args.kernel}: point-to-point tests run without a compute kernel")
    if args.collective in S.FAN and args.kernel != NO_KERNEL:
        p.error(f"--kernel {args.kernel}: {args.collective} (point-to-point messages) runs "
                "without a compute kernel")
    for flag, text, takes in (("--src-ranks", args.src_ranks, ("pt2pt", "incast")),
                              ("--dst-ranks", args.dst_ranks, ("pt2pt", "multicast"))):
        problem = S.rank_list_problem(text)
        if text and args.collective not in takes:
            p.error(f"{flag} names the ranks of {' or '.join(takes)}, not of "
                    f"{args.collective}")
        if problem:
            p.error(f"{flag} {problem}")
    try:  # point-to-point, incast and multicast: their pairs, as a study checks them
        S.message_pairs(args.collective, args.pt2pt, ranks, args.root, args.src_ranks,
                        args.dst_ranks)
    except S.PairsError as exc:
        p.error(pairs_error(exc))
    from dlbench.comms import backends

    problem = backends.problem(args.backend, args.device)
    if problem:
        p.error(f"--backend {problem}")
    if args.use_device_time and args.collective == "pt2pt":
        p.error("--use-device-time: point-to-point tests are timed on the host")
    if args.use_device_time and args.device != "gpu":
        p.error("--use-device-time: CUDA events time the device, --device gpu only")
    if args.graph_launches and (args.collective == "pt2pt" or args.collective in S.FAN):
        p.error(f"--graph-launches: a graph of collectives; {args.collective} sends "
                "point-to-point messages")
    from dlbench.comms import graphs

    problem = graphs.problem(args.graph_launches, args.device, bool(args.z),
                             args.use_device_time, args.kernel != NO_KERNEL)
    if problem:
        p.error(f"--graph-launches: {problem}")
    if args.kernel == EMBEDDING and (args.mm_shape or given(argv, "--mm-dim")):
        p.error("--mm-dim/--mm-shape: emb_lookup is shaped by its tables (--emb-dim, "
                "--num-embs, --num-emb-tables-per-device, --batch-size, --bag-size)")
    if args.mm_shape and args.kernel != NO_KERNEL:
        from dlbench.comms.overlap import operands

        try:
            operands(args.kernel, args.mm_dim, args.mm_shape)
        except ValueError as exc:
            p.error(f"--mm-dim/--mm-shape: {exc}")
    from dlbench import cli

    cli.check_minimums(p, args, KIND)
    for flag, text in (("--i", args.i), ("--o", args.o)):
        problem = S.split_problem(text)
        if text and args.collective != S.UNEVEN:
            p.error(f"{flag} splits the blocks of {S.UNEVEN}, not {args.collective}")
        if problem:
            p.error(f"{flag} {problem}")
    if args.include_0b and (args.collective != S.UNEVEN or args.i or args.o):
        p.error("--include-0B sets the blocks of the all_to_allv sweep (without --i or --o)")
    problem = S.zero_block_problem(ranks)
    if args.include_0b and problem:
        p.error(f"--include-0B {problem}")
    if args.collective == S.UNEVEN and (args.i or args.o):
        try:
            S.exchange(S.split_of(args.i), S.split_of(args.o), ranks)
        except ValueError as exc:
            p.error(f"--{'i' if args.i else 'o'}: {exc}")
        if args.ss:
            p.error("--ss: an all_to_allv given --i or --o exchanges those blocks, no list "
                    "of sizes")
    elif args.ss:  # PARAM's list of sizes instead of the sweep
        problem = S.sizes_problem(args.ss)
        if problem:
            p.error(f"--ss {problem}")
    else:
        if args.b > args.e:
            p.error(f"--b {args.b} is above --e {args.e}: no message size")
        problem = S.sweep_problem(args.b, args.e, args.sb, args.data_type)
        if problem:
            p.error(f"--sb {problem}")
    return args, argv
