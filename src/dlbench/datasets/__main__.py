"""``python -m dlbench.datasets synthetic|lmdb|recordio|check ...``

Bad input ends with one line on stderr naming the file and what is wrong, exit code 2.
Writers are imported on demand: ``recordio`` runs in the MXNet environment, which has
neither lmdb nor protobuf; the others run in the main one. ``recordio --python PY`` runs
the conversion again in MXNet's interpreter PY (the workflow starts it with its own, which
always exists, so that a missing MXNet environment is a recorded failure, not a job that
exits 127 and holds back the aggregate).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import signal
import sys
from collections.abc import Iterator, Sequence

from dlbench.datasets.errors import DatasetError


def _at_least(minimum: int):
    """An argparse type: an integer of at least ``minimum``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


PYTHON_OPTION = "--python"

_positive = _at_least(1)
_non_negative = _at_least(0)


def _quality(text: str) -> int:
    value = _positive(text)
    if value > 100:
        raise argparse.ArgumentTypeError(f"must be within 1..100, got {value}")
    return value


def _writer_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--source", required=True, help="ImageFolder root: <source>/<class>/<image>")
    p.add_argument("--out", required=True,
                   help="folder to prepare (replaced on success; an earlier dataset or an "
                        "empty folder, never a folder of other files)")
    p.add_argument("--resize", type=_non_negative, default=0,
                   help="shorter side in pixels (0: keep the source size)")
    p.add_argument("--center-crop", action="store_true",
                   help="crop the central square of the shorter side before resizing")
    p.add_argument("--quality", type=_quality, default=95, help="JPEG quality when re-encoding")
    p.add_argument("--shuffle", action="store_true", help="store records in a seeded random order")
    p.add_argument("--seed", type=_non_negative, default=0)
    p.add_argument("--workers", type=_positive, default=1, help="processes decoding/encoding")
    p.add_argument("--subset", type=_non_negative, default=0,
                   help="first N images of each class (0: all)")


def _record_failure_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--record-failure", action="store_true",
                   help="on bad input write the reason into OUT/preparation-error.txt and "
                        "exit 0, so that the cells reading OUT fail with it (workflow use)")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m dlbench.datasets", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)

    p = sub.add_parser("synthetic", help="deterministic JPEG ImageFolder")
    p.add_argument("--out", required=True)
    p.add_argument("--classes", type=_positive, required=True)
    p.add_argument("--images-per-class", type=_positive, required=True)
    p.add_argument("--image-size", type=_positive, required=True, help="shorter side in pixels")
    p.add_argument("--seed", type=_non_negative, default=0)
    p.add_argument("--workers", type=_positive, default=1)
    _record_failure_option(p)

    p = sub.add_parser("lmdb", help="Caffe LMDB of Datum records (convert_imageset layout)")
    _writer_options(p)
    _record_failure_option(p)
    p.add_argument("--encoded", action="store_true", help="store JPEG bytes, not raw pixels")

    # No abbreviations: --python is taken out of the command line by its exact spelling.
    p = sub.add_parser("recordio", help="MXNet RecordIO as im2rec (run with MXNet's python)",
                       allow_abbrev=False)
    _writer_options(p)
    _record_failure_option(p)
    p.add_argument(PYTHON_OPTION, metavar="PY",
                   help="MXNet's interpreter: convert in a subprocess of it (default: here)")

    p = sub.add_parser("check", help="validate a prepared dataset")
    p.add_argument("--format", required=True, choices=("image_folder", "caffe_lmdb", "recordio"))
    p.add_argument("--sample", type=_non_negative, default=64,
                   help="records whose images are decoded (0: all)")
    p.add_argument("path")
    return ap


def run(args: argparse.Namespace) -> dict:
    writer = {k: getattr(args, k, None) for k in
              ("resize", "center_crop", "quality", "shuffle", "seed", "workers", "subset")}
    if args.command == "synthetic":
        from dlbench.datasets.synthetic import Spec, generate

        spec = Spec(args.classes, args.images_per_class, args.image_size, args.seed)
        return generate(args.out, spec, workers=args.workers)
    if args.command == "lmdb":
        from dlbench.datasets import lmdb_writer

        return lmdb_writer.write(args.source, args.out, encoded=args.encoded, **writer)
    if args.command == "recordio":
        try:
            import mxnet  # noqa: F401  (fail here, in one line, outside the MXNet env)

            from dlbench.datasets import recordio_writer
        except ImportError as exc:
            raise DatasetError(f"recordio needs mxnet ({exc}); run it with the MXNet "
                               f"environment's python") from None
        return recordio_writer.write(args.source, args.out, **writer)
    from dlbench.datasets.check import check

    return check(args.format, args.path, sample=args.sample)


def _without_python_option(argv: Sequence[str]) -> list[str]:
    """The command line less ``--python PY``: what the MXNet interpreter is given."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == PYTHON_OPTION:
            skip = True
        elif not arg.startswith(PYTHON_OPTION + "="):
            out.append(arg)
    return out


def _missing_interpreter(python: str) -> str:
    from dlbench.datasets import failure
    from dlbench.launch import unavailable_reason  # envs/mxnet_env.py's unavailable.txt

    reason = unavailable_reason(python)
    return (failure.MISSING_INTERPRETER.format(python=python)
            + (f": {reason}" if reason else " (no such executable; make mxnet-env builds it)"))


def _in_interpreter(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Convert in ``args.python`` (a subprocess, its output passed through). A child that
    fails without recording why (it crashed, or bad input without --record-failure)
    fails here the same way. A stop (SIGTERM, SIGHUP) reaches the child as SIGTERM
    (``subproc.run_tee``), which removes its temporary folder; once it has ended, this
    process ends by the same signal (``_exit_on_termination``), recording nothing: a
    stopped conversion is no bad input."""
    from dlbench import subproc

    if shutil.which(args.python) is None:
        raise DatasetError(_missing_interpreter(args.python))
    cmd = [args.python, "-m", "dlbench.datasets", *_without_python_option(argv)]
    rc, tail = subproc.run_tee(cmd)
    if rc == 0:
        return 0
    if not args.record_failure:
        return rc if rc > 0 else 1
    line = subproc.last_error_line(tail) or subproc.exit_words(rc)
    raise DatasetError(f"{args.python} -m dlbench.datasets recordio: {line}")


@contextlib.contextmanager
def _exit_on_termination() -> Iterator[None]:
    """SIGTERM and SIGHUP (Snakemake stopping a job, a cluster ending it at its time
    limit) end the conversion by an exception: by their default action the process would
    vanish without unwinding, leaving its half-written temporary folder beside the output
    for good (``atomic.prepared_dir`` removes it on an exception)."""
    from dlbench import subproc

    def handler(signum, frame):  # noqa: ARG001 (signal handler signature)
        # Stops that follow are ignored while the temporary folder is removed: a cluster's
        # stop reaches every process of the job, and the parent of a conversion in MXNet's
        # interpreter passes its own on (subproc.run_tee). SIGKILL still ends it.
        for sig in subproc.STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        raise SystemExit(128 + signum)

    with subproc.stop_signals_handled(handler):
        yield


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser().parse_args(argv)
    try:
        with _exit_on_termination():
            if getattr(args, "python", None):
                return _in_interpreter(args, argv)
            summary = run(args)
    except (DatasetError, OSError) as exc:
        if isinstance(exc, DatasetError):
            message = str(exc)
        else:  # disk full, permission denied: still one line naming the file
            message = f"{exc.filename or ''}: {exc.strerror or exc}"
        print(f"error: {message}", file=sys.stderr)
        if getattr(args, "record_failure", False):
            from dlbench.datasets import failure

            print(f"recorded in {failure.record(args.out, message)}", file=sys.stderr)
            return 0
        return 2
    keys = ("format", "count", "num_classes", "labels", "path")
    print(json.dumps({k: summary[k] for k in keys if k in summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
