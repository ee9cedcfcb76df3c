"""Benchmark one MXNet cell: a Gluon model trained or run for inference, or the RecordIO
input pipeline alone, and write the result document.

mxnet is imported only after the flags are parsed, so that a missing or broken MXNet still
leaves a one-line error and, with ``--output``, a failed result.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from dlbench import axes, cellrun, cli, cpu, environment, harness, models, monitor, stages
from dlbench import result as R
from dlbench.cellrun import CellError
from dlbench.mxnet import dist, reader_choice

PROG = "python -m dlbench.mxnet"
ENV_HINT = ("create the MXNet environment with: make mxnet-env (python -m venv .venvs/mxnet && "
            ".venvs/mxnet/bin/pip install -r envs/mxnet.txt)")
# cuDNN's autotune, which --cudnn_benchmark sets on a GPU cell (DLBS's mxnet.cudnn_autotune
# sets it so: 1 or 0).
CUDNN_AUTOTUNE = "MXNET_CUDNN_AUTOTUNE_DEFAULT"
# extra.flops_note of every model measurement: FLOPs are counted by PyTorch's counter only.
NO_FLOP_COUNT = "not available: MXNet has no FLOP counter"
# Library settings worth recording, with MXNet's defaults where the variable is unset.
_FLAG_DEFAULTS = {
    CUDNN_AUTOTUNE: "1",
    "MXNET_ENGINE_TYPE": "ThreadedEnginePerDevice",
    "MXNET_GPU_WORKER_NTHREADS": "2",
    "MXNET_CPU_WORKER_NTHREADS": "1",
    "MXNET_EXEC_BULK_EXEC_TRAIN": "1",
    "MXNET_USE_FUSION": "1",
    "OMP_NUM_THREADS": None,
}
_FLAG_PREFIXES = ("MXNET_", "OMP_", "KMP_", "DMLC_ROLE", "DMLC_NUM_")
# The PyTorch runner's optimizer (DLBS's MXNet backend also trained with SGD), so that both
# frameworks do the same update work per step.
_SGD = {"learning_rate": 0.01, "momentum": 0.9}


def build_parser():
    # The axis flags (DLBS's, from dlbench.axes: --data_reader too) and the monitor's.
    parser = harness.parser("mxnet", PROG)
    # DLBS's benchmarks.py flag, for a run by hand (no study axis: a cell's reader keeps
    # its own prefetch): batches the RecordIO reader decodes ahead.
    parser.add_argument("--prefetch_buffer", type=cli.at_least(1), default=None,
                        help="RecordIO batches decoded ahead (default: the reader's own)")
    return parser


def cell_of(args) -> dict[str, Any]:
    return axes.cell_from_args("model", "mxnet", "mxnet", args)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    cli.check_minimums(parser, args, "mxnet")
    if args.preprocess_threads < 1:
        parser.error(f"--preprocess_threads must be >= 1, got {args.preprocess_threads}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    res = R.new_result(kind="loader" if args.data_loader_only else "model", cell=cell_of(args),
                       study=args.study, cell_id=args.cell_id)
    if args.num_nodes > 1 and not args.kv_store.startswith("dist"):
        parser.error(f"--num_nodes {args.num_nodes} needs a distributed kvstore "
                     f"(--kv_store dist_sync, dist_device_sync or dist_async)")
    # Before mxnet is imported (and inherited by a dist_* cell's worker).
    set_cudnn_autotune(args, os.environ)
    if args.kv_store.startswith("dist") and "DMLC_ROLE" not in os.environ:
        # The parameter-server roles are started here (dlbench.mxnet.dist).
        return dist.launch(args, sys.argv[1:] if argv is None else argv, cell_of(args))
    # A dist_* cell's worker writes its part; dist.launch prints the cell's lines once.
    part = dist.writes_part(os.environ)
    try:
        import mxnet as mx
    except (ImportError, OSError) as exc:  # OSError: a CUDA build without its libraries
        return _mxnet_missing(res, args.output, exc, summary=not part)
    if not part:
        print_dlbs_version(mx.__version__)
    with cellrun.recorded(res, args.output or None, write=not part):
        run_cell(mx, args, res)
    if part and args.output:
        R.write(res, args.output)
    return cellrun.exit_code(res)


def set_cudnn_autotune(args, environ: dict[str, str]) -> str | None:
    """MXNET_CUDNN_AUTOTUNE_DEFAULT as --cudnn_benchmark says, on a GPU cell (what was set
    is recorded with the environment's library_flags); None on a CPU, which has no cuDNN.
    An autotune the environment already turns on (2: MXNet's fastest algorithms, whatever
    their workspace) is kept: --cudnn_benchmark, on by default, only says "autotune"."""
    if args.device != "gpu":
        return None
    if not args.cudnn_benchmark:
        environ[CUDNN_AUTOTUNE] = "0"
    elif environ.get(CUDNN_AUTOTUNE, "0") in ("", "0"):
        environ[CUDNN_AUTOTUNE] = "1"
    return environ[CUDNN_AUTOTUNE]


def print_dlbs_version(version: str) -> None:
    """The lines DLBS's MXNet backend starts with: the version under both of its keys."""
    for key in ("mxnet.version", "exp.framework_ver"):
        print(f"__{key}__={json.dumps(version)}")
    sys.stdout.flush()


def _mxnet_missing(res: dict[str, Any], output: str, exc: BaseException, *,
                   summary: bool) -> int:
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    message = f"dlbench.mxnet: mxnet is not importable by {sys.executable} ({reason}); {ENV_HINT}"
    print(message, file=sys.stderr)
    R.finish(res, "failed", message)
    if output:
        res["environment"] = {**environment.collect(), "framework": "mxnet"}
        R.write(res, output)
    if summary:
        cellrun.print_dlbs_summary(res)
    return 1


@dataclass
class Plan:
    """A cell's inputs, all checked before any network is built."""

    spec: models.ModelSpec
    opts: dict[str, Any]
    precision: str
    ctxs: list
    record: tuple[Path, Path] | None  # (.rec, .idx), None for synthetic data
    kv: Any  # mx.kv.KVStore, or its name when one device needs none
    rank: int
    workers: int
    batch_size: int  # per device

    @property
    def batch(self) -> int:
        """Samples per iteration on this worker: every device gets batch_size."""
        return self.batch_size * len(self.ctxs)


def run_cell(mx: ModuleType, args, res: dict[str, Any]) -> None:
    with stages.stage("environment"):
        res["environment"] = mxnet_environment(mx)
    plan = make_plan(mx, args)
    # MXNet does not tell a GPU's compute capability: GPU cells say None (unknown).
    res["extra"]["precision_native"] = cpu.precision_native(plan.precision, args.device)
    common = {"kv_store": args.kv_store, "contexts": [str(c) for c in plan.ctxs],
              "rank": plan.rank, "num_workers": plan.workers,
              # The record file read, links resolved (as PyTorch's folder read).
              "data_source": str(Path(plan.record[0]).resolve()) if plan.record
              else "synthetic"}
    if plan.record:
        from dlbench.mxnet import data

        # Read before measuring: a damaged manifest fails the cell at once, in one line.
        res["extra"]["data_manifest"] = data.manifest_of(plan.record[0])
    gpu_ids = [c.device_id for c in plan.ctxs if c.device_type == "gpu"]
    mon = monitor.ResourceMonitor(args.monitor_interval_ms,
                                  gpus=monitor.nvml_ids(gpu_ids) if gpu_ids else [])
    try:
        if args.data_loader_only:
            measurement = _loader_measurement(mx, args, plan, common, [mon])
        else:
            measurement = _model_measurement(mx, args, plan, common, [mon])
    except mx.base.MXNetError as exc:
        raise type(exc)(mxnet_error_line(str(exc))) from exc
    res["measurements"] = [measurement]
    monitor.attach(res, args.output, mon)
    res["status"] = "ok"


def make_plan(mx: ModuleType, args) -> Plan:
    from dlbench.mxnet import data

    spec = _spec(args.model)
    try:
        opts = spec.opts(args.model_opts)
    except ValueError as exc:
        raise CellError(str(exc)) from None
    precision = cli.precision(args.dtype)
    if precision == "float16" and args.device == "cpu" and not args.data_loader_only:
        raise CellError("--dtype float16 needs --device gpu: mxnet's CPU operators have no "
                        "float16 GEMM or convolution")
    if args.data_loader_only and not args.data_dir:
        raise CellError("--data_loader_only needs --data_dir (a RecordIO file): "
                        "synthetic data has no input pipeline")
    if args.data_dir and spec.input_kind != "image":
        raise CellError(f"--data_dir: model {spec.name} takes {spec.input_kind} of shape "
                        f"{spec.input_shape}; RecordIO input needs an image model")
    record = data.resolve_record(args.data_dir) if args.data_dir else None
    ctxs = contexts(mx, args.device, args.num_gpus)
    training = not (args.forward_only or args.data_loader_only)
    kv, rank, workers = kvstore(mx, args.kv_store, args.device, len(ctxs),
                                needs_kv=training or args.kv_store.startswith("dist"))
    return Plan(spec, opts, precision, ctxs, record, kv, rank, workers, args.batch_size)


_LOG_PREFIX = re.compile(r"^\[\d\d:\d\d:\d\d\] \S+:\d+: ")


def mxnet_error_line(text: str) -> str:
    """The message of an MXNetError without the C++ frames it starts with (the result keeps
    one line; ``out of memory`` stays in it so the cell is classified as oom)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    marked = [line for line in lines if line.startswith("MXNetError:")]
    line = (marked[-1].removeprefix("MXNetError:").strip() if marked
            else lines[-1] if lines else "")
    # "[04:25:38] ../src/io/iter_image_recordio_2.cc:330: Check failed: ...": the time and
    # the C++ source would make each run's same failure a different text.
    line = _LOG_PREFIX.sub("", line)
    if "out of memory" in text.lower() and "out of memory" not in line.lower():
        line += " (out of memory)"
    return line


def _spec(name: str) -> models.ModelSpec:
    try:
        spec = models.get(name)
    except KeyError as exc:
        raise CellError(exc.args[0]) from None
    if "mxnet" not in spec.builders:
        available = ", ".join(models.for_framework("mxnet"))
        raise CellError(f"--model {name}: not available for mxnet (available: {available})")
    return spec


def mxnet_environment(mx: ModuleType) -> dict[str, Any]:
    env = environment.collect()
    flags = {name: os.environ.get(name, default) for name, default in _FLAG_DEFAULTS.items()}
    flags.update({k: v for k, v in os.environ.items() if k.startswith(_FLAG_PREFIXES)})
    unset = sorted(name for name in _FLAG_DEFAULTS if name not in os.environ)
    features = mx.runtime.Features()
    enabled = sorted(name for name, feature in features.items() if feature.enabled)
    env.update(framework="mxnet", framework_version=mx.__version__, library_flags=flags,
               library_flags_unset=unset, mxnet_features=enabled,
               mxnet_num_gpus=mx.context.num_gpus() if "CUDA" in enabled else 0)
    return env


def contexts(mx: ModuleType, device: str, count: int) -> list:
    """``count`` contexts; on the CPU these are separate MXNet CPU contexts in one process
    (data parallelism emulated over one thread pool, as MXNet's own multi-device tests do)."""
    if device == "cpu":
        return [mx.cpu(i) for i in range(count)]
    available = mx.context.num_gpus()
    if available < count:
        raise CellError(f"--num_gpus {count}: mxnet {mx.__version__} sees {available} GPU(s) "
                        "(a CPU-only mxnet wheel sees none; install e.g. mxnet-cu112)")
    return [mx.gpu(i) for i in range(count)]


def kvstore(mx: ModuleType, kind: str, device: str, num_contexts: int, *,
            needs_kv: bool) -> tuple[Any, int, int]:
    """The kvstore for gluon.Trainer, this worker's rank and the worker count."""
    if kind == "nccl":
        if device != "gpu":
            raise CellError("--kv_store nccl needs --device gpu")
        if not mx.runtime.Features().is_enabled("NCCL"):
            raise CellError("--kv_store nccl: this mxnet build has no NCCL support")
    if kind.startswith("dist"):
        store = mx.kv.create(kind)
        return store, store.rank, store.num_workers
    if needs_kv and num_contexts > 1:
        return mx.kv.create(kind), 0, 1
    # One device: the Trainer updates in place and creates no kvstore.
    return kind, 0, 1


def _open_reader(args, plan: Plan, input_shape: tuple[int, ...]):
    """The RecordIO reader ``--data_reader`` names (``auto``: see reader_choice)."""
    from dlbench.mxnet import data

    rec, idx = plan.record
    kind = reader_choice.choose_reader(args.data_reader, args.preprocess_threads, idx=idx,
                                       batch=plan.batch, parts=plan.workers)
    return data.open_reader(kind, rec, idx, batch_size=plan.batch, input_shape=input_shape,
                            threads=args.preprocess_threads, part_index=plan.rank,
                            num_parts=plan.workers, prefetch=args.prefetch_buffer)


def on_devices(parts: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """A batch's parts once on their devices: MXNet queues the copies and the conversion
    to the model's input, which, waited for here, are data wait (as the PyTorch runner's),
    not the step's compute."""
    for x, y in parts:
        x.wait_to_read()
        y.wait_to_read()
    return parts


def _reader_facts(args, reader) -> dict[str, Any]:
    return {**reader.facts(), "data_reader_requested": args.data_reader,
            "preprocess_threads": args.preprocess_threads}


def _loader_measurement(mx: ModuleType, args, plan: Plan, common: dict,
                        hooks: Sequence[Any]) -> dict[str, Any]:
    reader = _open_reader(args, plan, tuple(plan.spec.input_shape))

    def fetch():
        return on_devices(reader.to_devices(reader.next(), plan.ctxs, plan.precision))

    try:
        loop = harness.timed_loop(fetch, lambda parts: None, mx.nd.waitall,
                                  args.num_warmup_batches, args.num_batches, hooks=hooks,
                                  steady=harness.until_steady(args))
    finally:
        reader.close()
    return R.measurement(name=args.model, pass_="loader", times_s=loop.times_s,
                         items_per_iteration=plan.batch, throughput_unit="images/s",
                         extra={**common, **_reader_facts(args, reader),
                                **harness.warmup_facts(loop)})


def _model_measurement(mx: ModuleType, args, plan: Plan, common: dict,
                       hooks: Sequence[Any]) -> dict[str, Any]:
    from mxnet import autograd, gluon

    from dlbench.mxnet import data, zoo

    with stages.stage("build"):
        built = plan.spec.builder("mxnet")(plan.spec, plan.opts)
        net = built.block
        parameters = zoo.parameter_count(net, built.input_shape)
        net.initialize(mx.init.Xavier(magnitude=2.0), ctx=plan.ctxs)
        if plan.precision == "float16":
            net.cast("float16")  # BatchNorm keeps float32 parameters (Gluon's cast rule)
        net.hybridize(static_alloc=True, static_shape=True)

    reader = None
    if plan.record:
        reader = _open_reader(args, plan, built.input_shape)

        def fetch():
            return on_devices(reader.to_devices(reader.next(), plan.ctxs, plan.precision))
    else:
        fixed = data.synthetic(plan.ctxs, args.batch_size, built.input_shape,
                               built.num_classes, plan.precision)

        def fetch():
            return fixed

    if args.forward_only:
        def step(parts) -> None:
            with autograd.predict_mode():
                for x, _ in parts:
                    net(x)
    else:
        fp16 = {"multi_precision": True} if plan.precision == "float16" else {}
        trainer = gluon.Trainer(net.collect_params(), "sgd", {**_SGD, **fp16}, kvstore=plan.kv)
        loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

        def step(parts) -> None:
            with autograd.record():
                # Loss in float32 whatever the network's precision.
                losses = [loss_fn(net(x).astype("float32", copy=False), y) for x, y in parts]
            autograd.backward(losses)
            trainer.step(plan.batch)  # gradients are summed over devices: scale by the batch

    try:
        loop = harness.timed_loop(fetch, step, mx.nd.waitall, args.num_warmup_batches,
                                  args.num_batches, hooks=hooks,
                                  steady=harness.until_steady(args))
    finally:
        if reader is not None:
            reader.close()
    real = plan.record is not None
    return R.measurement(
        name=args.model, pass_="inference" if args.forward_only else "training",
        times_s=loop.times_s, items_per_iteration=plan.batch, parameters=parameters,
        data_wait_s=loop.data_wait_s if real else None,
        compute_s=loop.compute_s if real else sum(loop.times_s),
        # No counter sees into MXNet's operators: no TFLOP/s, and the result says why.
        extra={**common, **built.facts, "flops_note": NO_FLOP_COUNT,
               "hybridize": "static_alloc,static_shape",
               "optimizer": None if args.forward_only else "sgd",
               **(_reader_facts(args, reader) if real else {"preprocess_threads": None}),
               **harness.warmup_facts(loop)})
