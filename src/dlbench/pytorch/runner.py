"""``python -m dlbench.pytorch``: benchmark one PyTorch model cell (DLBS's flags, seed 000).

Warmup iterations are excluded; every measured iteration is timed on its own, after the
device has finished it (CUDA synchronisation), and includes the wait for its input batch,
which is also recorded apart from compute. Inference runs under ``torch.inference_mode``.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from dlbench import (
    axes,
    cellrun,
    cli,
    cpu,
    environment,
    harness,
    models,
    monitor,
    multinode,
    stages,
)
from dlbench import result as R
from dlbench.profiling import torch_profiler


def parser() -> argparse.ArgumentParser:
    # The axis flags (DLBS's, from dlbench.axes) and the monitor's; then this runner's own.
    p = harness.parser("pytorch", "python -m dlbench.pytorch")
    p.add_argument("--loader_workers", choices=["threads", "processes"], default="threads",
                   help="decode in threads of this process (faster on few cores) or in "
                        "DataLoader worker processes")
    cli.add_bool(p, "--count_flops", True, "count FLOPs of one iteration (untimed)")
    p.add_argument("--rdzv_endpoint", default=None,
                   help="torchrun rendezvous host:port for multi-node runs (default: standalone)")
    p.add_argument("--torch_profile_dir", default="",
                   help="write a torch.profiler trace and operator table of a few measured "
                        "iterations into this folder")
    p.add_argument("--torch_profile_schedule", type=torch_profiler.parse_schedule,
                   default=torch_profiler.DEFAULT_SCHEDULE, metavar="WAIT,WARMUP,ACTIVE",
                   help="measured iterations the profiler skips, warms up on and records "
                        "(default: 1,1,3)")
    return p


def cell_of(args: argparse.Namespace) -> dict[str, Any]:
    return axes.cell_from_args("model", "pytorch", "pytorch", args)


def timed_loop(batches: Iterator[Any], step: Callable[..., None], sync: Callable[[], None],
               warmup: int, measured: int, *, hooks: Sequence[Any] = (),
               steady: harness.UntilSteady | None = None) -> harness.LoopTimes:
    """The harness's loop over an iterator of argument tuples."""
    return harness.timed_loop(lambda: next(batches), lambda batch: step(*batch), sync,
                              warmup, measured, hooks=hooks, steady=steady)


def phase_hooks(args: argparse.Namespace, device: Any,
                rank: int) -> tuple[monitor.ResourceMonitor | None, list[Any]]:
    """The resource monitor and, when asked for, torch.profiler; on rank 0 only (it writes
    the result), where the monitor covers every GPU of the cell on this node."""
    if rank != 0:
        return None, []
    mon = monitor.ResourceMonitor(args.monitor_interval_ms,
                                  gpus=monitored_gpus(device, args.num_gpus),
                                  pid=monitored_process())
    hooks: list[Any] = [mon]
    if args.torch_profile_dir:
        hooks.append(torch_profiler.TorchProfilerHook(
            args.torch_profile_dir, *args.torch_profile_schedule, device_type=device.type))
    return mon, hooks


def monitored_process(environ: Mapping[str, str] | None = None) -> int | None:
    """The root of the processes whose memory and CPU the monitor sums: this process (its
    loader workers with it), or, in a data-parallel cell of several processes on this
    node, torchrun's agent, whose children are every rank's process: rank 0's siblings
    are no descendants of its own, and would be left out."""
    environ = os.environ if environ is None else environ
    try:
        local_ranks = int(environ.get("LOCAL_WORLD_SIZE", "1"))
    except ValueError:
        local_ranks = 1
    return os.getppid() if local_ranks > 1 else None


def monitored_gpus(device: Any, count: int) -> list[int | str]:
    """NVML ids (UUIDs, which CUDA_VISIBLE_DEVICES renumbering does not change) of the
    cell's GPUs; none for a CPU cell."""
    import torch

    if device.type != "cuda":
        return []
    first = device.index or 0
    ids: list[int | str] = []
    for i in range(first, min(first + count, torch.cuda.device_count())):
        uuid = str(torch.cuda.get_device_properties(i).uuid)
        ids.append(uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}")
    return ids


def precision_native(precision: str, device: Any) -> bool | None:
    """Whether the cell's precision is native on the device it runs on (False: emulated,
    as bfloat16 is on CPUs without AVX-512 BF16 or AMX)."""
    import torch

    capability = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
    return cpu.precision_native(precision, "gpu" if device.type == "cuda" else "cpu",
                                capability)


def count_flops(step: Callable[..., None], batch: Any) -> tuple[float | None, list[str]]:
    """One step's FLOPs (None: none counted), and the operators with matrix products it ran
    that the counter has no formula for: the count misses their work."""
    import torch

    from dlbench import flop_counter

    # nn.TransformerEncoderLayer's inference fast path (BERT's eval) runs a whole layer as
    # one fused kernel the counter cannot see into: counted on the path it fuses, the same
    # arithmetic. Off for the count only; the timed steps run as the model would.
    mha = getattr(torch.backends, "mha", None)
    fast = mha.get_fastpath_enabled() if mha is not None else None
    counter = flop_counter.counter()
    try:
        if mha is not None:
            mha.set_fastpath_enabled(False)
        with counter:
            step(*batch)
    finally:
        if mha is not None:
            mha.set_fastpath_enabled(fast)
    total = counter.get_total_flops()
    return (float(total) if total else None), sorted(counter.uncounted)


def compile_warmup(mode: str, step: Callable[..., None], batches: Any,
                   sync: Callable[[], None]) -> dict[str, Any]:
    """The first compiled step (its wall time is the compile time) and more warm-up steps
    until the step time is steady; what dynamo compiled meanwhile."""
    from dlbench.pytorch import execution

    cache = execution.cache_state()  # before compiling: was the cache warm?
    compile_s = execution.first_step(step, next(batches), sync, mode, cellrun.is_oom)
    first = execution.DynamoCounts.now()
    settle_steps, steady = execution.settle(step, batches, sync)
    counts = execution.DynamoCounts.now()
    facts: dict[str, Any] = {
        "mode": mode, "compile_time_s": compile_s, "graphs": counts.graphs,
        "graph_breaks": counts.graph_breaks,
        "recompilations": counts.frames - first.frames,
        "extra_warmup_steps": settle_steps, "steady": steady,
        "note": (f"warm-up extended by {settle_steps} steps until two steps took within "
                 f"{execution.STEADY_TOLERANCE:.0%} of each other" if steady else
                 f"the step time was not steady after {settle_steps} extra warm-up steps"),
    }
    if cache is not None:
        facts["inductor_cache_dir"] = cache["dir"]
        facts["inductor_cache_warm"] = cache["warm"]
    return facts


def accuracy_of(cell_module: Any, eager_module: Any, built: Any,
                args: argparse.Namespace, mode: Any, device: Any) -> dict[str, Any]:
    """The cell's output on one fixed batch against eager float32 (dlbench.pytorch.accuracy);
    a check that cannot run says why instead of failing a measured cell."""
    import torch

    from dlbench.pytorch import accuracy, data, execution

    if torch.distributed.is_initialized():
        return {"checked": False, "why": "not checked in a data-parallel cell"}
    # The measured batch size: a compiled model would compile again for another shape.
    inputs, _ = next(data.synthetic(built, args.batch_size, device, torch.float32, seed=4321))
    cell_inputs = inputs.to(mode.param_dtype) if inputs.is_floating_point() else inputs
    (cell_inputs,) = next(execution.batches_in(iter([(cell_inputs,)]), args.memory_format))
    try:
        return accuracy.check(cell_module, eager_module, inputs, cell_inputs, mode.name,
                              mode.autocast(device.type))
    except Exception as exc:  # noqa: BLE001 (the measurement stands; say why unchecked)
        return {"checked": False, "why": cellrun.one_line(exc)}


def fsdp_sharded(built: Any, device: Any, dtype: Any) -> Any:
    """The built model sharded over the ranks with FSDP2's ``fully_shard``, one unit per
    module ``built.shard_units`` gives, then the whole: each rank holds 1/world of the
    weights, gradients and optimizer state, gathering a layer's weights only while it
    computes. A model built on the meta device gets storage for this rank's shard only
    (``to_empty``, which leaves weights and buffers garbage), then its builder's
    initialisation: each rank draws its own shard's random weights."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    # On the cell's device: FSDP's default is the machine's accelerator, a CPU cell's too.
    mesh = init_device_mesh(device.type, (torch.distributed.get_world_size(),))
    module = built.module.to(dtype=dtype)  # the other cells' cast, buffers too (free on meta)
    for unit in built.shard_units(module):
        fully_shard(unit, mesh=mesh)
    fully_shard(module, mesh=mesh)
    built_on = "meta" if any(p.is_meta for p in module.parameters()) else device.type
    if built_on == "meta":
        module.to_empty(device=device)
        built.init_weights(module)
    built.facts.update(parallel="fsdp", built_on=built_on, rank0_parameter_bytes=sum(
        p.to_local().numel() * p.element_size() for p in module.parameters()))
    return module


def run(args: argparse.Namespace, res: dict[str, Any]) -> None:
    import torch

    from dlbench.pytorch import (
        accuracy,
        data,
        distributed,
        execution,
        precision,
        steps,
        torch_environment,
        zoo,
    )

    topo = distributed.topology()
    if args.device == "gpu" and not torch.cuda.is_available():
        raise cellrun.CellError("--device gpu requested but CUDA is not available to torch "
                                f"{torch.__version__}")
    if args.device == "gpu" and args.num_gpus > torch.cuda.device_count() * max(
            1, topo.world_size if topo.distributed else 1):
        raise cellrun.CellError(f"--num_gpus {args.num_gpus} but {torch.cuda.device_count()} "
                                "GPUs are visible")
    device_type = "cuda" if args.device == "gpu" else "cpu"
    device = distributed.init(topo, device_type, args.nccl_env)
    torch.manual_seed(1234 + topo.rank)
    mode = precision.setup(cli.precision(args.dtype), device_type)
    if device_type == "cuda":
        precision.apply_cudnn_flags(args.cudnn_benchmark, args.cudnn_fastest)
    res["environment"] = torch_environment.collect(device)
    res["extra"]["precision_native"] = precision_native(mode.name, device)

    # Made where it runs: an 8 B-parameter language model needs no 32 GB host copy first.
    # An FSDP cell of several processes is made on the meta device (no memory), sharded,
    # and only then given each rank's shard: a model larger than one device can train.
    with stages.stage("build"):
        fsdp = topo.distributed and models.get(args.model).opts(
            args.model_opts).get("parallel") == "fsdp"
        with torch.device("meta" if fsdp else device):
            built = zoo.build(args.model, args.model_opts)
        if fsdp and built.init_weights is None:
            # Its builder cannot initialise a model made on meta (transformers before 5):
            # whole on every rank, sharded after, as before.
            with torch.device(device):
                built = zoo.build(args.model, args.model_opts)
        if built.pure_precision:
            mode = precision.pure(mode)
        if fsdp:
            eager_module = model = fsdp_sharded(built, device, mode.param_dtype)
        else:
            eager_module = built.module.to(device=device, dtype=mode.param_dtype)
            model = execution.to_memory_format(eager_module, args.memory_format)
    n_params = zoo.parameter_count(model)
    if args.data_dir:
        # The folder read, links resolved: tells apart runs over different trees given one
        # dataset name; recorded before reading, so that a failed cell names it too.
        res["extra"]["data_source"] = str(Path(args.data_dir).resolve())
        source, manifest = data.real(
            built, data_dir=args.data_dir, backend=args.data_backend,
            batch_size=args.batch_size, shuffle=args.data_shuffle,
            workers=args.num_loader_threads, rank=topo.rank, world_size=topo.world_size,
            device=device, dtype=mode.param_dtype, worker_kind=args.loader_workers)
        res["extra"]["data_manifest"] = manifest
        res["extra"]["loader_workers"] = args.loader_workers
        batches = iter(source)
    else:
        batches = data.synthetic(built, args.batch_size, device, mode.param_dtype,
                                 seed=topo.rank)
    batches = execution.batches_in(batches, args.memory_format)
    sync = precision.synchronizer(device)
    items = args.batch_size * topo.world_size * built.items_per_sample
    mon, hooks = phase_hooks(args, device, topo.rank)
    for hook in hooks:  # a profiled run's result says so: it is no measurement to compare
        if isinstance(hook, torch_profiler.TorchProfilerHook):
            res["extra"]["profiled"] = hook.facts()
    # Every process warms up as long as the slowest to settle (a step's collectives).
    steady = harness.until_steady(args, lambda done: distributed.all_agree(done, device))

    if args.data_loader_only:
        loop = timed_loop(batches, lambda *b: None, sync, args.num_warmup_batches,
                          args.num_batches, hooks=hooks, steady=steady)
        times = distributed.slowest_rank_times(loop.times_s, device)
        split = input_split(loop, topo)
        res["measurements"] = [R.measurement(name=args.model, pass_="loader", times_s=times,
                                             items_per_iteration=items,
                                             data_wait_s=split.data_wait_s,
                                             extra={**harness.warmup_facts(loop),
                                                    **split_facts(split, topo)})]
        if mon:
            attach_monitor(res, args, mon, topo.world_size)
        distributed.shutdown()  # a data-parallel loader cell's group too (NCCL warns, may hang)
        return

    if topo.distributed and not fsdp:
        ids = [device.index] if device_type == "cuda" else None
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)
        built.facts["parallel"] = "ddp"

    def make_step(module: torch.nn.Module) -> steps.Step:
        if args.forward_only:
            return steps.inference_step(module, mode, device_type)
        return steps.training_step(module, built, mode, device_type)

    flops, uncounted = None, []
    if args.count_flops:  # on the eager model: compiled or not, the arithmetic is the same
        with stages.stage("flop_count"):
            flops, uncounted = count_flops(make_step(model), next(batches))
            sync()
    extra = dict(built.facts)
    if built.flops_per_sample is not None:
        # The model's standard formula per rank's batch (MFU's numerator), the count beside.
        extra["counted_flops_per_iteration"] = flops * topo.world_size if flops else None
        if uncounted:  # the count beside the formula is short by their work (Mixtral's)
            extra["counted_flops_note"] = (f"FlopCounterMode has no formula for "
                                           f"{', '.join(uncounted)}: their work is not in it")
        flops = built.flops_per_sample(not args.forward_only) * args.batch_size
    elif uncounted:
        # A count without those operators' work would make a TFLOP/s too low: none, and why.
        extra["flops_note"] = (f"not available: FlopCounterMode has no formula for "
                               f"{', '.join(uncounted)} (it counted {flops or 0:.0f} FLOPs "
                               f"without them)")
        flops = None
    elif args.count_flops and not flops:
        # FlopCounterMode sees PyTorch's operators only (deepwave's propagator is its own).
        extra["flops_note"] = "not available: FlopCounterMode counted no FLOPs in this model"
    # Compiled after DDP wraps the model, as PyTorch recommends for DDP with torch.compile.
    with stages.stage("build"):  # the optimizer too
        cell_module = execution.compiled(model, args.compile, device=device)
        step = make_step(cell_module)
    if args.compile != "eager":
        with stages.stage("compile"):
            extra["compile"] = compile_warmup(args.compile, step, batches, sync)
    before = execution.DynamoCounts.now()
    if device_type == "cuda":
        # The peak of the warm-up and measured steps (weights, optimizer state, activations),
        # not of the FLOP count's, the compiler's autotuning or the accuracy check's copies.
        sync()
        torch.cuda.reset_peak_memory_stats(device)
    loop = timed_loop(batches, step, sync, args.num_warmup_batches, args.num_batches,
                      hooks=hooks, steady=steady)
    if device_type == "cuda":
        extra["max_memory_allocated_bytes"] = torch.cuda.max_memory_allocated(device)
    times = distributed.slowest_rank_times(loop.times_s, device)
    split = input_split(loop, topo)
    wait, compute = split.data_wait_s, split.compute_s
    extra.update(harness.warmup_facts(loop), **split_facts(split, topo))
    if topo.distributed:
        hosts = distributed.rank_hosts()
        extra.update(world_size=topo.world_size, hosts=hosts, num_hosts=len(set(hosts)))
    if args.compile != "eager":
        recompiled = execution.DynamoCounts.now().frames - before.frames
        extra["compile"]["recompilations_measured"] = recompiled
        if recompiled:  # flagged, not hidden: those iterations include compiling
            extra["compile"]["recompiled_in_measurement"] = True
    last_loss = getattr(step, "last_loss", None)
    if last_loss is not None:
        value = float(last_loss.detach())
        extra["loss_finite"] = math.isfinite(value)
        # JSON has no NaN: a non-finite loss is null, and its text says which.
        extra["last_loss"] = value if extra["loss_finite"] else None
        if not extra["loss_finite"]:
            extra["last_loss_text"] = str(value)
    if accuracy.wanted(mode.name, args.compile):
        with stages.stage("accuracy"):
            extra["accuracy"] = accuracy_of(cell_module, eager_module, built, args, mode,
                                            device)
    res["measurements"] = [R.measurement(
        name=args.model, pass_="inference" if args.forward_only else "training",
        times_s=times, items_per_iteration=items, parameters=n_params,
        throughput_unit=built.throughput_unit,
        flops_per_iteration=flops * topo.world_size if flops else None,
        data_wait_s=wait, compute_s=compute, extra=extra)]
    if "phi" in extra:
        # ParaDnn's own figure, 6·Φ·bs·steps / time for training (2·Φ for inference): its
        # steps' whole time, so over the mean step time (not the median other figures use).
        per_sample = (2 if args.forward_only else 6) * extra["phi"]
        extra["phi_tflops"] = per_sample * items / res["measurements"][0]["time_s"]["mean"] / 1e12
    if "fc_shape" in extra:
        # A ParaDnn FC cell's bytes (its roofline point): dlbench.models.paradnn.fc_bytes.
        from dlbench.models import paradnn

        m = res["measurements"][0]
        # Each rank moves its own weights and its own batch (as the FLOPs count every rank).
        m["bytes_per_iteration"] = float(topo.world_size * paradnn.fc_bytes(
            *extra.pop("fc_shape"), batch=int(items) // topo.world_size,
            training=not args.forward_only,
            element_size=torch.empty((), dtype=mode.param_dtype).element_size()))
        m["gbps"] = m["bytes_per_iteration"] / m["time_s"]["median"] / 1e9
    if mon:
        attach_monitor(res, args, mon, topo.world_size)
    distributed.shutdown()


def input_split(loop: harness.LoopTimes, topo: Any) -> harness.InputSplit:
    """The measured time's split into waiting for input and the rest, of the rank that
    waited longest (one collective, after the timed loop); this process's in one."""
    from dlbench.pytorch import distributed

    splits = (distributed.gather((loop.data_wait_s, loop.compute_s)) if topo.distributed
              else [(loop.data_wait_s, loop.compute_s)])
    return harness.input_split(splits)


def split_facts(split: harness.InputSplit, topo: Any) -> dict[str, Any]:
    """Whose split a data-parallel cell records, and every rank's wait; nothing for one
    process."""
    return split.facts() if topo.distributed else {}


def attach_monitor(res: dict[str, Any], args: argparse.Namespace, mon: monitor.ResourceMonitor,
                   world_size: int) -> None:
    """The monitor's summary in the result. Rank 0 samples its own node only: a cell over
    several nodes counts this node's share of the samples against this node's energy."""
    items = monitor.items_of(res["measurements"])
    if world_size <= args.num_gpus:
        monitor.attach(res, args.output, mon, items)
        return
    summary = monitor.attach(res, args.output, mon, items * args.num_gpus / world_size)
    scope = (f"node 0 of {args.num_nodes}: its {args.num_gpus} GPUs' energy and their share "
             "of the samples")
    monitor.scope_energy_note(summary, scope)


def _launch_distributed(args: argparse.Namespace, argv: list[str]) -> int:
    """Parent of a data-parallel cell: run torchrun (on each node through srun when the cell
    spans nodes); rank 0 writes the result. If the workers die before rank 0 could write
    it, record the first node srun reported and the first error a worker reported."""
    from dlbench.pytorch import distributed

    output = Path(args.output) if args.output else None
    if args.num_nodes > 1:
        try:
            cmd = distributed.multi_node_command(args.num_nodes, args.num_gpus, args.device,
                                                 argv, module="dlbench.pytorch")
        except multinode.MultiNodeError as exc:
            return _record_launch_failure(args, output, "failed", str(exc), 1)
    else:
        missing = distributed.missing_gpus(args.device, args.num_gpus)
        if missing:
            return _record_launch_failure(args, output, "failed", missing, 1)
        cmd = distributed.torchrun_command(args.num_gpus, argv, args.rdzv_endpoint)
    rc, lines = distributed.run_workers(cmd, args.num_gpus, output)
    if output and not output.exists():
        status, message = distributed.workers_outcome(rc, lines, args.num_nodes)
        _record_launch_failure(args, output, status, message, rc)
    return rc


def _record_launch_failure(args: argparse.Namespace, output: Path | None, status: str,
                           message: str, rc: int) -> int:
    print(f"dlbench.pytorch: {message}", file=sys.stderr)
    if output:
        res = R.new_result(kind="model", cell=cell_of(args), study=args.study,
                           cell_id=args.cell_id)
        R.finish(res, status, message)
        res["environment"] = environment.collect()
        R.write(res, output)
        cellrun.print_dlbs_summary(res)
    return rc or 1


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = parser()
    args = p.parse_args(argv)
    cli.check_minimums(p, args, "pytorch")
    if args.torch_profile_dir and args.num_batches < sum(args.torch_profile_schedule):
        p.error(f"--torch_profile_schedule {','.join(map(str, args.torch_profile_schedule))} "
                f"needs --num_batches >= {sum(args.torch_profile_schedule)}, "
                f"got {args.num_batches}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    if not args.model or args.model not in models.names():
        p.error(f"--model: unknown model {args.model!r} (valid: {', '.join(models.names())})")
    # Before torchrun starts workers: each would print its own traceback.
    cli.check_cell(p, "model", "pytorch", cell_of(args))
    from dlbench.pytorch import distributed

    if (args.num_gpus > 1 or args.num_nodes > 1) and not distributed.is_worker():
        return _launch_distributed(args, argv)
    topo = distributed.topology()
    # A loader cell is one from the start: a failure before its loop is still the loader's.
    res = R.new_result(kind="loader" if args.data_loader_only else "model", cell=cell_of(args),
                       study=args.study, cell_id=args.cell_id)
    is_rank0 = topo.rank == 0
    with cellrun.recorded(res, args.output if is_rank0 else None, write=is_rank0):
        run(args, res)
    if res["status"] in ("oom", "failed"):
        print(f"{multinode.ERROR_MARK} {res['status']} rank {topo.rank}: {res['error']}",
              file=sys.stderr)
    return cellrun.exit_code(res)
