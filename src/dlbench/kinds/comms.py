"""Collective-communication cells: one collective over a sweep of message sizes among
num_gpus processes, run by ``python -m dlbench.comms`` (PARAM's comms.py flags)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dlbench import axes, frameworks
from dlbench.axes import AxisError
from dlbench.comms import backends
from dlbench.comms.graphs import problem as graph_problem
from dlbench.comms.overlap import NO_KERNEL, operands
from dlbench.comms.sizes import (
    UNEVEN,
    PairsError,
    exchange,
    groups_problem,
    message_pairs,
    root_problem,
    split_of,
    sweep_problem,
    zero_block_problem,
)
from dlbench.comms.validation import ranks_problem
from dlbench.kinds import CellKind, slug


class CommsKind(CellKind):
    name = "comms"
    result_kind = "comms"
    id_axes = ("framework", "collective", "data_type", "num_gpus", "device")
    runner = "dlbench.comms"

    def id_part(self, axis: str, value: Any, params: Mapping[str, Any]) -> str | None:
        if axis == "num_gpus":
            return f"{value}x"  # ranks: pytorch_all_reduce_float32_2x_gpu_<hash>
        return None

    def readable_id(self, params: Mapping[str, Any]) -> list[str]:
        parts = super().readable_id(params)
        nodes = params.get("num_nodes") or 1
        # ..._8x_2nodes_nonblocking_gpu_...: only a multi-node cell says so (as model cells
        # do), a non-blocking one and one overlapped with computation: the ids of earlier
        # cells stay as they were.
        extra = [f"{nodes}nodes"] if nodes > 1 else []
        extra += ["nonblocking"] if params.get("blocking") is False else []
        extra += ["devicetime"] if params.get("device_time") else []
        graphs = params.get("graph_launches") or 0
        extra += [f"graph{graphs}"] if graphs else []  # ..._1x_graph10_gpu_...
        kernel = params.get("compute_kernel")
        extra += [kernel] if kernel not in (None, NO_KERNEL) else []  # ..._2x_gemm_gpu_...
        groups = params.get("comm_groups") or 1
        extra += [f"{groups}groups"] if groups > 1 else []  # ..._8x_4groups_gpu_...
        extra += ["include0B"] if params.get("include_0b") else []  # PARAM's --include-0B
        backend = params.get("backend")
        extra += [backend] if backend not in (None, backends.AUTO) else []  # ..._2x_gloo_gpu_
        i = self.id_axes.index("num_gpus") + 1
        parts = [*parts[:i], *extra, *parts[i:]]
        if params.get("collective") == "pt2pt":  # pytorch_pt2pt_pairwise_float32_...
            j = self.id_axes.index("collective") + 1
            pairs = [str(params.get("pt2pt"))]
            if params.get("src_ranks") or params.get("dst_ranks"):  # ..._pairwise_0-3to4-7_
                pairs.append(slug(f"{params.get('src_ranks') or 0}to"
                                  f"{params.get('dst_ranks') or 1}"))
            parts = [*parts[:j], *pairs, *parts[j:]]
        named = {"incast": ("from", "src_ranks"), "multicast": ("to", "dst_ranks")}.get(
            params.get("collective"), ("", ""))
        if params.get(named[1]):  # pytorch_incast_from1-3_float32_...: the peers named
            j = self.id_axes.index("collective") + 1
            parts = [*parts[:j], slug(f"{named[0]}{params[named[1]]}"), *parts[j:]]
        if params.get("root"):  # pytorch_broadcast_root3_float32_...: a root other than 0
            j = self.id_axes.index("collective") + 1
            parts = [*parts[:j], f"root{params['root']}", *parts[j:]]
        return parts

    def check(self, params: Mapping[str, Any], datasets: Mapping[str, Any]) -> None:
        if self.name not in frameworks.get(params["framework"]).kinds:
            raise AxisError("framework", "collective benchmarks run on pytorch only")
        world = params["num_gpus"] * (params.get("num_nodes") or 1)
        groups = params.get("comm_groups") or 1
        problem = groups_problem(groups, world)
        if problem:
            raise AxisError("comm_groups", f"{problem} (num_gpus x num_nodes; comm_groups "
                                           "must divide them)")
        ranks = world // groups  # the processes of one collective
        problem = root_problem(params["root"], ranks) if params.get("root") else None
        if problem:
            of = "each of comm_groups" if groups > 1 else "num_gpus x num_nodes"
            raise AxisError("root", f"{problem} ({of})")
        try:  # point-to-point, incast and multicast cells: their pairs
            message_pairs(params["collective"], params.get("pt2pt") or "", ranks,
                          params.get("root") or 0, params.get("src_ranks") or "",
                          params.get("dst_ranks") or "")
        except PairsError as exc:
            raise _axis_error(exc) from None
        problem = zero_block_problem(ranks)
        if params.get("include_0b") and problem:
            raise AxisError("include_0b", f"{problem} (num_gpus x num_nodes)")
        problem = backends.problem(params.get("backend"), params["device"])
        if problem:
            raise AxisError("backend", problem)
        if params.get("device_time") and params["device"] != "gpu":
            raise AxisError("device_time", "CUDA events time the device: device gpu only")
        problem = graph_problem(params.get("graph_launches") or 0, params["device"],
                                params.get("blocking") is not False,
                                bool(params.get("device_time")),
                                params.get("compute_kernel") not in (None, NO_KERNEL))
        if problem:
            raise AxisError("graph_launches", problem)
        kernel, shape = params.get("compute_kernel"), params.get("mm_shape")
        if shape and kernel not in (None, NO_KERNEL):
            try:
                operands(kernel, 1, shape)  # the count of values the kernel takes
            except ValueError as exc:
                raise AxisError("mm_shape", str(exc)) from None
        problem = ranks_problem(params["collective"], params["data_type"], ranks)
        if params.get("validate") and problem:
            raise AxisError("validate", problem)
        splits = {axis: split_of(params.get(axis) or "") for axis in ("in_split", "out_split")}
        if params["collective"] == UNEVEN and any(splits.values()):
            try:
                exchange(splits["in_split"], splits["out_split"], ranks)
            except ValueError as exc:
                axis = "in_split" if splits["in_split"] else "out_split"
                raise AxisError(axis, str(exc)) from None
            if params.get("message_sizes"):
                raise AxisError("message_sizes", "an all_to_allv given in_split or out_split "
                                                 "exchanges those blocks: no list of sizes")
            return  # one exchange (the splits' forms checked with the axes), no sweep
        if params.get("message_sizes"):
            return  # a list of sizes (its form checked with the axis), no sweep
        if params["begin_size"] > params["end_size"]:
            raise AxisError("begin_size", f"{params['begin_size']} is above end_size "
                                          f"{params['end_size']}: no message size")
        problem = sweep_problem(params["begin_size"], params["end_size"],
                                params.get("step_bytes") or 0, params["data_type"])
        if problem:
            raise AxisError("step_bytes", problem)

    def command(self, params: Mapping[str, Any], output: Path, python: str,
                data_dir: str | None) -> list[str]:
        return [python, "-m", self.runner, *axes.argv(self.name, params)]


KIND = CommsKind()


def _axis_error(exc: PairsError) -> AxisError:
    """A pattern that cannot pair as the study's one line: a count of processes says which
    axes make it."""
    extra = " (num_gpus x num_nodes)" if exc.field == "num_gpus" else ""
    return AxisError(exc.field, f"{exc}{extra}")
