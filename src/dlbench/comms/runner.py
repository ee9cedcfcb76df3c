"""``python -m dlbench.comms``: a collective-communication cell, PARAM's comms.py with
nccl-tests' bandwidths (dlbench.comms.sizes).

``--num_gpus N`` processes on each of ``--num_nodes`` nodes (torchrun; over ``--backend``,
NCCL on GPUs and gloo on CPU unless named, dlbench.comms.backends; on several nodes, one
torchrun per node of the Slurm job started with srun, as for a model cell,
dlbench.multinode) run one collective on buffers of every size of the sweep.
Each size is one measurement: the per-iteration times of the slowest rank (the one
harness's timed loop: warmup excluded, each iteration ended synchronised), the algorithm
bandwidth (``gbps``) and the bus bandwidth (``bus_gbps`` in its extra; both null for a
point-to-point latency test, whose ping-pong is no bandwidth). Every rank
allocates a size's buffers before any of them communicates; where one rank cannot (out of
memory), all of them stop the sweep there together, instead of the others waiting in a
collective it never joins, and the sizes left are named in the result.

``--z 1`` (blocking, the default) waits for every collective before the next, so each
iteration is one collective timed on its own; as PARAM's, every rank waits at a barrier
before each measured iteration (each point-to-point test's too), outside its time, so that
no rank's late start, nor a rooted collective's pipelining across iterations, enters it.
``--z 0`` (PARAM's non-blocking mode) issues ``--window`` collectives back to back and
waits for them once, as nccl-tests times its iterations: an iteration's time divided by
the window is one collective's, with the launch of each overlapping the transfer before
it.

``--collective pt2pt`` (or PARAM's ``--pt2pt one2one|pairwise``) measures messages
between pairs of ranks instead (those PARAM's ``--src-ranks`` and ``--dst-ranks`` name,
else the pattern's): a size's latency, unidirectional and bidirectional bandwidth, each a
measurement (dlbench.comms.pt2pt).

``--kernel gemm|add|sub|add_num|sub_num|copy|d2h|h2d|emb_lookup`` (or PARAM's ``--mode
comms-compute``, whose kernel is gemm)
overlaps each iteration's collectives with ``--num-compute`` runs of the kernel on
``--mm-dim`` square operands (or those of ``--mm-shape m,n,p``, PARAM's ``--mm-dim m n
p``) of ``--comp-data-type``, the embedding lookup on the tables of ``--emb-dim``,
``--num-embs``, ``--num-emb-tables-per-device``, ``--batch-size`` and ``--bag-size``
(PARAM's): a size's measurement is then the
collectives' own part of the overlapped iterations, and its extra the computation's,
against the kernels timed alone before the sweep (dlbench.comms.overlap).

``--multi-comms N`` (PARAM's) splits the ranks into N communicators (rank r in group r
mod N), each running the collective among its members at the same time: sizes, bus
factor, root and validation are a group's, the times the slowest rank's of all.

With ``--c 1`` (PARAM's data validation) each size is checked after its timed iterations:
the collective once more on known data, the cell failed when any rank receives a wrong
value (dlbench.comms.validation).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from pathlib import Path
from typing import Any

from dlbench import axes, cellrun, links, monitor, multinode
from dlbench import result as R
from dlbench.comms import fan as fans
from dlbench.comms import param_output
from dlbench.comms import sizes as S
from dlbench.comms.command_line import KIND, ONE_CELL, checked, given, listed_runs, parser
from dlbench.comms.overlap import NO_KERNEL

log = logging.getLogger("dlbench.comms")
# An all_to_allv's blocks on one rank: the elements it sends to and receives from each rank.
Splits = tuple[list[int], list[int]] | None
# What the monitor's energy covers: not the measured iterations alone (no samples per joule)
MONITOR_WINDOW = ("the whole sweep (each size's buffers, warm-up, measured iterations and "
                  "validation)")


def cell_of(args: argparse.Namespace) -> dict[str, Any]:
    return axes.cell_from_args(KIND, KIND, "pytorch", args)


def _tensors(collective: str, count: int, dtype: Any, ranks: int, device: Any,
             splits: Splits = None, fan: fans.Fan | None = None) -> tuple:
    """The buffers of one size: (input, output) as the collective takes them (an
    all_to_allv's: as long as this rank's ``splits``, input and output; an incast's root:
    a row for each sender's message, a multicast's receivers: the message)."""
    import torch

    def make(n: int) -> Any:
        if dtype.is_floating_point:
            return torch.rand(n, dtype=dtype, device=device)
        return torch.randint(0, 100, (n,), dtype=dtype, device=device)

    if splits is not None:
        return make(sum(splits[0])), torch.empty(sum(splits[1]), dtype=dtype, device=device)
    if fan is not None:
        return fans.buffers(collective, count, make,
                            lambda *shape: torch.empty(*shape, dtype=dtype, device=device), fan)
    if collective in S.PIECE_IN:
        return make(count // ranks), torch.empty(count, dtype=dtype, device=device)
    if collective in S.PIECE_OUT:
        return make(count), torch.empty(count // ranks, dtype=dtype, device=device)
    if collective in ("all_to_all", "pt2pt"):  # pt2pt: the message, the one received
        return make(count), torch.empty(count, dtype=dtype, device=device)
    return make(count), None


def _call(collective: str, buffers: tuple, async_op: bool = False, root: int = 0,
          splits: Splits = None, fan: fans.Fan | None = None, group: Any = None) -> Any:
    """The collective on a size's buffers, a function of an (unused) batch; with
    ``async_op`` it returns its work handle without waiting. ``root``: the rank that
    broadcasts or scatters, or receives the reduction or the gathered pieces (of
    ``group``'s ranks); ``splits``: an all_to_allv's blocks to and from each rank;
    ``fan``: an incast's or multicast's ranks; ``group``: the communicator (PARAM's
    --multi-comms), None for every rank's."""
    import torch.distributed as dist

    source, target = buffers
    if fan is not None:
        return fans.call(collective, buffers, fan, async_op)
    # torch names a root by its global rank, also in a group.
    owner = root if group is None else dist.get_global_rank(group, root)
    if collective == "all_reduce":
        return lambda _: dist.all_reduce(source, group=group, async_op=async_op)
    if collective == "broadcast":
        return lambda _: dist.broadcast(source, src=owner, group=group, async_op=async_op)
    if collective == "reduce":
        return lambda _: dist.reduce(source, dst=owner, group=group, async_op=async_op)
    if collective in ("gather", "scatter"):  # the root's buffer in one piece per rank
        whole = target if collective == "gather" else source
        pieces = (list(whole.chunk(dist.get_world_size(group)))
                  if dist.get_rank(group) == root else None)
        if collective == "gather":
            return lambda _: dist.gather(source, gather_list=pieces, dst=owner, group=group,
                                         async_op=async_op)
        return lambda _: dist.scatter(target, scatter_list=pieces, src=owner, group=group,
                                      async_op=async_op)
    if collective == "all_gather":
        gather = _single_tensor(dist, "all_gather_single", "all_gather_into_tensor")
        return lambda _: gather(target, source, group=group, async_op=async_op)
    if collective == "reduce_scatter":
        scatter = _single_tensor(dist, "reduce_scatter_single", "reduce_scatter_tensor")
        return lambda _: scatter(target, source, group=group, async_op=async_op)
    if splits is not None:
        ins, outs = splits
        return lambda _: dist.all_to_all_single(target, source, output_split_sizes=outs,
                                                input_split_sizes=ins, group=group,
                                                async_op=async_op)
    return lambda _: dist.all_to_all_single(target, source, group=group, async_op=async_op)


def _single_tensor(dist: Any, name: str, before: str) -> Any:
    """The single-tensor collective under its current name (torch 2.14's ``*_single``;
    the name it had before, which 2.14 deprecates, on older releases: the same call)."""
    return getattr(dist, name, None) or getattr(dist, before)


def _step(collective: str, buffers: tuple, window: int | None, root: int = 0,
          splits: Splits = None, fan: fans.Fan | None = None, group: Any = None) -> Any:
    """What the timed region runs: one collective (blocking, ``window`` None), or
    ``window`` of them issued back to back and then waited for, and nothing else."""
    if window is None:
        return _call(collective, buffers, root=root, splits=splits, fan=fan, group=group)
    issue = _call(collective, buffers, async_op=True, root=root, splits=splits, fan=fan,
                  group=group)

    def step(batch: Any) -> None:
        works = [issue(batch) for _ in range(window)]
        for work in works:
            work.wait()

    return step


def _all_allocated(ok: bool, device: Any) -> bool:
    """Whether every rank holds its buffers (one small collective, outside any timing)."""
    import torch
    import torch.distributed as dist

    flag = torch.tensor([0 if ok else 1], dtype=torch.int32, device=device)
    dist.all_reduce(flag)
    return int(flag.item()) == 0


def _validate(collective: str, buffers: tuple, rank: int, ranks: int, sync: Any,
              size: int, peer: int | None = None, root: int = 0,
              splits: Splits = None, fan: fans.Fan | None = None, group: Any = None) -> None:
    """PARAM's --c 1, after a size's timed iterations: the collective (a point-to-point
    cell: each pair's exchange with ``peer``) once more on known data, every rank's check
    gathered so that all of them stop together on a failure. ``rank`` and ``ranks`` are
    the collective's (``group``'s); a failure names the global rank."""
    import dataclasses

    import torch.distributed as dist

    from dlbench.comms import pt2pt, validation

    validation.fill(collective, buffers, rank, ranks, root, splits)
    dist.barrier()
    if collective == "pt2pt":
        pt2pt.exchange(buffers, peer)
    else:
        _call(collective, buffers, root=root, splits=splits, fan=fan, group=group)(0)
    sync()
    checks: list[Any] = [None] * dist.get_world_size()
    mine = validation.check(collective, buffers, rank, ranks, peer, root, splits,
                            fan.peers if fan else ())
    dist.all_gather_object(checks, dataclasses.replace(mine, rank=dist.get_rank()))
    failure = validation.verdict(collective, S.size_text(size), checks)
    if failure:
        raise cellrun.CellError(failure)


def _timed_tests(args: argparse.Namespace, buffers: tuple, window: int | None,
                 peer: int | None, sender: bool, work: Any, device: Any,
                 splits: Splits = None, fan: fans.Fan | None = None,
                 group: Any = None) -> list[Any]:
    """What a size times: the collective (one test; with ``work``, a compute kernel,
    overlapped with it), or a point-to-point cell's three."""
    from dlbench.comms import overlap, pt2pt

    if args.collective == "pt2pt":
        return pt2pt.tests(buffers, peer, sender, args.window)
    if args.graph_launches:  # PARAM's: --n collectives in a graph, each replay timed
        from dlbench.comms import graphs

        graphed = graphs.GraphedCollectives(
            _call(args.collective, buffers, root=args.root, splits=splits, group=group),
            args.n, args.w)
        return [pt2pt.Test("collective", graphed, args.n, 1,
                           counts=(1, args.graph_launches))]
    if work is None:
        step = _step(args.collective, buffers, window, args.root, splits, fan, group)
        # An incast or multicast moves a message between the root and each of its peers.
        messages = len(fan.peers) if fan else 1
        if args.use_device_time:  # PARAM's: CUDA events around each iteration's collectives
            from dlbench import harness

            timed = harness.DeviceTimedStep(step, args.w + args.n)
            return [pt2pt.Test("collective", timed, window or 1, messages,
                               device_timed=timed)]
        return [pt2pt.Test("collective", step, window or 1, messages)]
    both = overlap.Overlapped(_call(args.collective, buffers, async_op=True, root=args.root,
                                    splits=splits, group=group),
                              window or 1, work, args.num_compute, device, args.w + args.n)
    return [pt2pt.Test("collective", both.step, window or 1, 1, overlapped=both)]


def _compute_alone(args: argparse.Namespace, device: Any, sync: Any) -> tuple[Any, dict]:
    """The compute kernel of an overlapped cell, and its iterations timed alone (the
    slowest rank's), before the sweep: what the overlapped iterations are held against.
    Every rank makes its operands before any of them computes (one may run out of memory)."""
    from dlbench import harness, stats
    from dlbench.comms import overlap
    from dlbench.pytorch import distributed

    work, problem = None, None
    embedding = args.kernel == overlap.EMBEDDING
    tables = overlap.Tables(dim=args.emb_dim, rows=args.num_embs, tables=args.num_emb_tables,
                            batch=args.emb_batch_size, bag=args.bag_size)
    try:
        work = overlap.kernel(args.kernel, args.mm_dim, args.comp_data_type, device,
                              args.mm_shape, tables=tables)
    except (RuntimeError, MemoryError) as exc:
        problem = exc
    if not _all_allocated(problem is None, device):
        if problem is not None:
            raise problem
        raise cellrun.CellError("another rank could not allocate its compute operands")
    # Timed as the kernels beside the collectives are: on a GPU by CUDA events with the
    # stream held while the host launches them, else by the host's clock.
    step = overlap.compute_step(work, args.num_compute)
    timed = harness.DeviceTimedStep(step, args.w + args.n) if device.type == "cuda" else None
    loop = harness.timed_loop(lambda: None, timed or step, sync, args.w, args.n)
    times = timed.times(args.n) if timed else loop.times_s
    summary = stats.summarize(distributed.slowest_rank_times(times, device))
    median = summary["median"]
    alone = {"kernel": args.kernel,
             "dim": None if args.mm_shape or embedding else args.mm_dim,
             "shape": list(work.shape),
             "data_type": "float32" if embedding else args.comp_data_type,
             **({"tables": dataclasses.asdict(tables)} if embedding else {}),
             "per_iteration": args.num_compute,
             "timer": "cuda_events" if timed else "host",
             "flops_per_iteration": work.flops * args.num_compute,
             "bytes_per_iteration": work.bytes * args.num_compute, "time_s": summary,
             "tflops": work.flops * args.num_compute / median / 1e12 if median > 0 else None,
             "gbps": work.bytes * args.num_compute / median / 1e9 if median > 0 else None}
    return work, alone


def _overlapped_extra(iterations: list[float], computing: list[float], alone: dict,
                      device: Any) -> dict[str, Any]:
    """What an overlapped size adds to its measurement: the whole iterations' times and the
    computation's inside them (the slowest rank's), and its slowdown against it alone."""
    from dlbench import stats
    from dlbench.pytorch import distributed

    compute = stats.summarize(distributed.slowest_rank_times(computing, device))
    return {"iteration_time_s": stats.summarize(
                distributed.slowest_rank_times(iterations, device)),
            "compute_overlapped": {"time_s": compute,
                                   "slowdown": compute["median"] / alone["time_s"]["median"]}}


def run(args: argparse.Namespace, res: dict[str, Any]) -> None:
    import torch
    import torch.distributed as dist

    from dlbench import harness
    from dlbench.comms import pt2pt
    from dlbench.pytorch import distributed, torch_environment
    from dlbench.pytorch.runner import monitored_gpus, monitored_process

    topo = distributed.topology()
    if args.device == "gpu" and not torch.cuda.is_available():
        raise cellrun.CellError("device gpu: torch sees no CUDA device")
    device = distributed.init(topo, "cuda" if args.device == "gpu" else "cpu",
                              args.nccl_env, args.backend)
    if not dist.is_initialized():  # one rank: a group of one, so the collectives still run
        dist.init_process_group(distributed.available_backend(args.backend, device.type),
                                store=dist.HashStore(), rank=0, world_size=1)
    res["environment"] = torch_environment.collect(device)
    # The processes of one collective: every rank, or each communicator's (PARAM's
    # --multi-comms: the world split by rank mod comm_groups, all running at once).
    group, ranks, rank = None, topo.world_size, topo.rank
    if args.multi_comms > 1:
        members = S.group_members(args.multi_comms, topo.world_size)
        made = [dist.new_group(m) for m in members]  # every rank makes every group
        mine = topo.rank % args.multi_comms
        group, ranks, rank = made[mine], len(members[mine]), members[mine].index(topo.rank)
        res["extra"]["groups"] = members
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    dtype = getattr(torch, args.data_type)
    given = _given_exchange(args, ranks)  # an all_to_allv's uneven blocks (--i, --o)
    if given:  # one size: what each rank sends (or, given only --o, receives)
        counts = [sum(S.split_of(args.i) or S.split_of(args.o))]
    else:
        sizes = (S.explicit_sizes(args.ss) if args.ss
                 else S.sweep(args.b, args.e, args.f, args.sb))
        counts = S.buffers(sizes, args.collective, args.data_type, ranks)
    factor = S.bus_factor(args.collective, ranks)
    element = S.DATA_TYPES[args.data_type]
    # Every rank's node and links (dlbench.links): one collective, before any timing.
    readings = distributed.gather(links.local(distributed.node_name(), dist.get_backend(),
                                              next(iter(monitored_gpus(device, 1)), None)))
    hosts = [reading["host"] for reading in readings]
    point_to_point = args.collective == "pt2pt"
    pairs = _pairs(args, ranks)  # a pt2pt, incast or multicast cell's; none for another
    peer, sender = S.pt2pt_peer(pairs, topo.rank) if point_to_point else (None, False)
    window = None if args.z and not point_to_point else args.window  # per timed iteration
    # What an iteration's time is divided by: a point-to-point cell's, per test (a
    # ping-pong's two ways, a window's messages).
    per_iteration = ({name: share for name, share, _ in pt2pt.shares(args.window)}
                     if point_to_point else args.n if args.graph_launches else window or 1)
    res["extra"].update(ranks=topo.world_size, group_ranks=ranks, bus_factor=factor,
                        backend=dist.get_backend(),
                        hosts=hosts, num_hosts=len(set(hosts)),
                        collectives_per_iteration=per_iteration,
                        # what timed the collectives: CUDA events on their stream (asked
                        # for, or overlapped with computation on a GPU) or the host's clock
                        timer="cuda_events" if device.type == "cuda" and not point_to_point
                        and (args.use_device_time or args.kernel != NO_KERNEL) else "host")
    if topo.rank == 0:  # what the lines below measure (one run may measure several)
        log.info("%s of %s among %d rank(s)%s over %s", args.collective, args.data_type,
                 ranks, f" in each of {args.multi_comms} groups" if group else "",
                 res["extra"]["backend"])
    fan = _fan(args.collective, topo.rank, args.root, pairs)
    if pairs:  # [sender, receiver] of each pair
        res["extra"]["pairs"] = [list(pair) for pair in pairs]
    # The links the collective crosses and the most bus bandwidth they allow. An incast's
    # or multicast's messages all cross its root's links and its bytes count every one:
    # its ranks are one communicator, the root's network not divided among its pairs.
    talking = [sorted({r for pair in pairs for r in pair})] if args.collective in S.FAN \
        else pairs
    link = links.ceiling(readings, links.communicators(
        topo.world_size, res["extra"].get("groups"), talking))
    res["extra"].update(link=link, link_readings=links.by_host(readings))
    # PARAM's barrier before each blocking iteration (and point-to-point test's); a graph
    # replays --n collectives at once, and --z 0 times a window issued back to back.
    barriers = point_to_point or (window is None and not args.graph_launches)
    work, alone = None, None
    if args.kernel != NO_KERNEL and not point_to_point:
        work, alone = _compute_alone(args, device, sync)
        res["extra"]["compute_alone"] = alone
    if given:
        res["extra"]["exchange"] = {"in_splits": given[0], "out_splits": given[1]}
    table = topo.rank == 0 and not point_to_point  # PARAM's COMMS-RES lines (stdout)
    if table:
        print(param_output.header(), flush=True)
    # The resource monitor (rank 0, every GPU of the cell on its node, and the memory and
    # CPU of every rank's process on it: torchrun's agent's tree) covers the whole sweep:
    # each size's warmup and measured iterations, and its validation.
    mon = monitor.ResourceMonitor(args.monitor_interval_ms if topo.rank == 0 else 0,
                                  gpus=monitored_gpus(device, args.num_gpus),
                                  pid=monitored_process(), window=MONITOR_WINDOW)
    with mon:
        for i, count in enumerate(counts):
            splits = _rank_splits(args.collective, given, count, rank, ranks,
                                  args.include_0b)
            buffers, problem = None, None
            try:
                buffers = _tensors(args.collective, count, dtype, ranks, device, splits, fan)
            except (RuntimeError, MemoryError) as exc:
                problem = exc
            if not _all_allocated(problem is None, device):
                res["extra"]["sizes_not_measured"] = [c * element for c in counts[i:]]
                res["extra"]["stopped_by"] = (cellrun.one_line(problem) if problem
                                              else "another rank could not allocate its buffers")
                del buffers
                break
            size = count * element
            measured = []
            for test in _timed_tests(args, buffers, window, peer, sender, work, device, splits,
                                     fan, group):
                dist.barrier()
                warmup, iterations = test.counts or (args.w, args.n)
                loop = harness.timed_loop(lambda: None, test.step, sync, warmup, iterations,
                                          hooks=(_BARRIER,) if barriers else ())
                # Overlapped with computation, the collectives' own part of each iteration.
                own, computing = test.overlapped.times(iterations) if test.overlapped \
                    else (test.device_timed.times(iterations) if test.device_timed
                          else loop.times_s, None)
                # One operation's time: an iteration's, shared among those it issued (its
                # rate is operations/s: a non-blocking iteration issues a window of them).
                times = [t / test.per_iteration
                         for t in distributed.slowest_rank_times(own, device)]
                m = R.measurement(
                    name=S.measurement_name(args.collective, size), op_name=args.collective, pass_=test.pass_,
                    times_s=times, items_per_iteration=1.0, throughput_unit="operations/s",
                    bytes_per_iteration=float(size * test.messages), extra={"elements": count})
                if test.pass_ == "latency":  # a ping-pong's bytes over time is no bandwidth
                    m["gbps"] = None
                    m["extra"]["bus_gbps"] = None
                else:
                    m["extra"]["bus_gbps"] = m["gbps"] * factor
                    m["extra"]["pct_of_link"] = links.share(
                        m["extra"]["bus_gbps"], link, test.pass_ == "bidirectional")
                if test.device_timed:  # the stream's hold before each measured call
                    m["extra"].update(test.device_timed.facts(iterations))
                if test.overlapped:  # a GPU's iterations by their events, hold left out
                    whole = test.overlapped.iterations(iterations) or loop.times_s
                    m["extra"].update(_overlapped_extra(whole, computing, alone, device),
                                      **test.overlapped.facts(iterations))
                measured.append(m)
                if table:
                    total = m["extra"]["iteration_time_s"]["median"] if test.overlapped else 0.0
                    moved = size * test.messages if args.collective in S.FAN else size
                    print(param_output.line(args.collective, args.data_type, args.tag, moved,
                                            count, ranks, times, m["gbps"], m["extra"]["bus_gbps"],
                                            total), flush=True)
                if topo.rank == 0:
                    log.info("%s %s %d B: %.1f us%s", args.collective, test.pass_, size,
                             m["time_s"]["median"] * 1e6, _bandwidths(m, link))
                    if test.overlapped:
                        log.info("%s beside it: %.1f us, %.2fx its time alone", args.kernel,
                                 m["extra"]["compute_overlapped"]["time_s"]["median"] * 1e6,
                                 m["extra"]["compute_overlapped"]["slowdown"])
            if args.c:
                _validate(args.collective, buffers, rank, ranks, sync, size, peer, args.root,
                          splits, fan, group)
                for m in measured:
                    m["extra"]["validated"] = True
            res["measurements"] += measured
            del buffers
            if device.type == "cuda":
                torch.cuda.empty_cache()
    if topo.rank == 0:
        monitor.attach(res, args.output, mon, items=0.0)  # its energy is no measured one's
    if not res["measurements"]:
        raise cellrun.CellError(f"no message size ran ({res['extra'].get('stopped_by')})")


class _Barrier:
    """A barrier of every rank before each measured iteration: the timed loop's hooks run
    outside the iterations' times, before the first and after each one."""

    def measure_start(self) -> None:
        import torch.distributed as dist

        dist.barrier()

    iteration_end = measure_start

    def measure_end(self) -> None:
        pass


_BARRIER = _Barrier()


def _pairs(args: argparse.Namespace, ranks: int) -> list[tuple[int, int]]:
    """The cell's (sender, receiver) pairs by the rule the study and the command line
    check it with (``sizes.message_pairs``); what cannot run, the cell's one line."""
    try:
        return S.message_pairs(args.collective, args.pt2pt, ranks, args.root, args.src_ranks,
                               args.dst_ranks)
    except ValueError as exc:
        raise cellrun.CellError(str(exc)) from None


def _fan(collective: str, rank: int, root: int, pairs: list[tuple[int, int]]
         ) -> fans.Fan | None:
    """An incast's or multicast's ranks from its pairs: the peer of each is the side that
    is not the root (an incast's senders, a multicast's receivers); None for another."""
    if collective not in S.FAN:
        return None
    peers = tuple(sender if collective == "incast" else receiver
                  for sender, receiver in pairs)
    return fans.Fan(rank, root, peers)


def _bandwidths(m: dict[str, Any], link: dict[str, Any] | None) -> str:
    """A measurement's bandwidths as its log line gives them (none for a latency test)."""
    if m["gbps"] is None:
        return ""
    share = m["extra"].get("pct_of_link")
    return (f", algbw {m['gbps']:.3f} GB/s, busbw {m['extra']['bus_gbps']:.3f} GB/s"
            + (f" ({share:.1f}% of {link['text']})" if share is not None and link else ""))


def _given_exchange(args: argparse.Namespace, ranks: int) -> tuple | None:
    """Every rank's (input, output) split of an all_to_allv given --i or --o; None for
    another cell."""
    if args.collective != S.UNEVEN or not (args.i or args.o):
        return None
    try:
        return S.exchange(S.split_of(args.i), S.split_of(args.o), ranks)
    except ValueError as exc:
        raise cellrun.CellError(str(exc)) from None


def _rank_splits(collective: str, given: tuple | None, count: int, rank: int,
                 ranks: int, zero_block: bool = False) -> Splits:
    """This rank's blocks to and from each rank for a buffer of ``count`` elements: an
    all_to_allv's given exchange, its blocks with one of 0 bytes (PARAM's --include-0B) or
    its even blocks; None for another collective."""
    if collective != S.UNEVEN:
        return None
    exchange = S.zero_block_exchange if zero_block else S.even_exchange
    ins, outs = given or exchange(count, ranks)
    return ins[rank], outs[rank]


def _launch(args: argparse.Namespace, argv: list[str]) -> int:
    """Parent of a multi-process cell: torchrun (on each node through srun when the cell
    spans nodes); rank 0 writes the result. Workers that die before it is written leave a
    failed result naming the first node srun reported, the first error or rank."""
    from dlbench.pytorch import distributed

    output = Path(args.output) if args.output else None
    # After "--": torchrun's parser would take PARAM's short flags (--n) for abbreviations
    # of its own options and stop; it hands the "--" on, and main drops it.
    workers = ["--", *argv]
    outcome = None
    try:
        if args.num_nodes > 1:
            cmd = distributed.multi_node_command(args.num_nodes, args.num_gpus, args.device,
                                                 workers, module="dlbench.comms")
        else:
            cmd = distributed.torchrun_command(args.num_gpus, workers, module="dlbench.comms")
            missing = distributed.missing_gpus(args.device, args.num_gpus)
            outcome = ("failed", missing) if missing else None
    except multinode.MultiNodeError as exc:
        outcome = ("failed", str(exc))
    rc = 1
    if outcome is None:
        rc, lines = distributed.run_workers(cmd, args.num_gpus, output)
        if output is None or output.exists():
            return rc
        outcome = distributed.workers_outcome(rc, lines, args.num_nodes)
    print(f"dlbench.comms: {outcome[1]}", file=sys.stderr)
    if output:
        res = R.new_result(kind=KIND, cell=cell_of(args), study=args.study,
                           cell_id=args.cell_id)
        R.finish(res, *outcome)
        R.write(res, output)
    return rc or 1


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    argv = argv[1:] if argv[:1] == ["--"] else argv  # a torchrun worker's (see _launch)
    p = parser()
    runs, collectives = listed_runs(argv)
    if len(runs) > 1 and any(given(argv, flag) for flag in ONE_CELL):
        p.error("--collectives/--data-types list several values: a result (--output, "
                "--study, --cell_id) is one collective's in one data type; give one of "
                "each, or list them in a study's grid (collective, data_type)")
    if collectives > 1 and given(argv, "--pt2pt"):
        p.error("--pt2pt selects the point-to-point tests: no list of collectives beside it")
    ready = [checked(p, run) for run in runs]  # every run's flags before any runs
    return max(_run(args, run) for args, run in ready)


def _run(args: argparse.Namespace, argv: list[str]) -> int:
    logging.basicConfig(level=args.log_level or logging.INFO,
                        format="%(asctime)s %(name)s: %(message)s")
    from dlbench.comms.command_line import RENDEZVOUS, defaults_unlike_params, unused_flags
    from dlbench.pytorch import distributed

    for flag in RENDEZVOUS:
        if getattr(args, flag.lstrip("-").replace("-", "_")) is not None \
                and not distributed.is_worker():
            log.warning("%s is not used: torchrun's rendezvous connects the processes "
                        "dlbench starts (on the first node of a multi-node cell)", flag)
    for line in unused_flags(args, argv) if not distributed.is_worker() else ():
        log.warning(line)
    unlike = defaults_unlike_params(args, argv)
    if unlike and not distributed.is_worker():  # a study's cell gives every flag
        log.info("defaults here, unlike PARAM's comms.py: %s; give them to measure as "
                 "PARAM does", unlike)

    if (args.num_gpus > 1 or args.num_nodes > 1) and not distributed.is_worker():
        return _launch(args, argv)
    topo = distributed.topology()
    res = R.new_result(kind=KIND, cell=cell_of(args), study=args.study, cell_id=args.cell_id)
    is_rank0 = topo.rank == 0
    try:
        with cellrun.recorded(res, args.output if is_rank0 else None, write=is_rank0):
            run(args, res)
    finally:
        distributed.shutdown()
    if res["status"] in ("oom", "failed"):
        print(f"{multinode.ERROR_MARK} {res['status']} rank {topo.rank}: {res['error']}",
              file=sys.stderr)
    return cellrun.exit_code(res)
