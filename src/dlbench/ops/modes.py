"""How an operator input is executed: eager, compiled (PARAM's ``--pt2-model``) or replayed
from CUDA graphs (PARAM's ``--cuda-graph``); the ``compile`` axis of operator cells.

- ``inductor``, ``inductor-reduce-overhead``, ``inductor-max-autotune``: the operator's call
  goes through ``torch.compile`` in that mode, as PARAM compiles ``op.forward`` (the
  backward is AOTAutograd's compiled backward of the same graph). Dynamo is reset before
  each input, so one input's kernels never serve another and no input meets dynamo's
  recompile limit (beyond it dynamo falls back to eager without a word); each input is
  compiled for its own static shapes, as eager runs it.
- ``cudagraphs``: PARAM's ``--cuda-graph``: after warm-up calls on a side stream, the
  forward (and with ``-b`` the backward) is captured once per input in a CUDA graph; the
  timed calls replay the graphs. GPU only.
- ``inductor-cudagraphs``: PARAM's ``--pt2-model --cuda-graph`` together: the compiled
  forward captured in a CUDA graph.

Compilation is never timed with the iterations: the first compiled call (with its
backward) runs alone before warm-up, and its wall time is the input's compile time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from dlbench.cellrun import is_oom
from dlbench.ops.grammar import tensors_in
from dlbench.pytorch import execution
from dlbench.pytorch.accuracy import compare, verdict

# The compile axis's values in operator cells: the model cells' modes, plus PARAM's two
# flags together.
CAPTURE_MODES = ("cudagraphs", "inductor-cudagraphs")
# mode -> the torch.compile mode it compiles with first (None: not compiled).
_INDUCTOR = {"inductor": "inductor", "inductor-reduce-overhead": "inductor-reduce-overhead",
             "inductor-max-autotune": "inductor-max-autotune",
             "inductor-cudagraphs": "inductor"}
# Side-stream calls before a capture: the allocator, cuDNN and cuBLAS settle there first,
# as torch.cuda.graph's documentation asks.
CAPTURE_WARMUP_CALLS = 3


def from_param_flags(pt2_model: bool, cuda_graph: bool) -> str:
    """The compile mode PARAM's two switches ask for."""
    if pt2_model:
        return "inductor-cudagraphs" if cuda_graph else "inductor"
    return "cudagraphs" if cuda_graph else "eager"


def without_capture(mode: str) -> str:
    """What runs of ``mode`` off a GPU: PARAM disables ``--cuda-graph`` there, with a warning."""
    return {"cudagraphs": "eager", "inductor-cudagraphs": "inductor"}.get(mode, mode)


def grad_targets(output: Any) -> list[torch.Tensor]:
    """The output tensors backward starts from (those autograd recorded)."""
    return [t for t in tensors_in([output]) if t.grad_fn is not None]


def _as_function(fn: Callable[..., Any]) -> Callable[..., Any]:
    # torch.compile traces Python frames: a builtin (torch.matmul) or an op overload is
    # compiled through a Python function that calls it, as PARAM compiles op.forward.
    def call(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return call


@dataclass
class Prepared:
    """What the timing loops call for one input, and what preparing it found."""

    fn: Callable[..., Any]
    args: list[Any]
    kwargs: dict[str, Any]
    leaves: list[torch.Tensor]
    backward: Callable[[list[torch.Tensor], list[torch.Tensor]], None] = torch.autograd.backward
    facts: dict[str, Any] = field(default_factory=dict)  # the result's "compile"
    counts: execution.DynamoCounts | None = None  # after the first compiled call

    def call(self) -> Any:
        return self.fn(*self.args, **self.kwargs)


def _one_step(fn: Callable[..., Any], args: list[Any], kwargs: dict[str, Any],
              backward: bool, leaves: list[torch.Tensor]) -> Any:
    out = fn(*args, **kwargs)
    targets = grad_targets(out) if backward else []
    if targets:
        torch.autograd.backward(targets, [torch.ones_like(t) for t in targets])
        for leaf in leaves:
            leaf.grad = None
    return out


def prepare(mode: str, fn: Callable[..., Any], args: list[Any], kwargs: dict[str, Any],
            leaves: list[torch.Tensor], backward: bool, device: torch.device) -> Prepared:
    """The input ready to be timed in ``mode``: compiled (the first call done and timed)
    and/or captured. A compiler failure raises a CellError with the compiler's first line."""
    prepared = Prepared(fn, args, kwargs, leaves)
    if mode == "eager":
        return prepared
    cuda = device.type == "cuda"

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    inductor_mode = _INDUCTOR.get(mode)
    if inductor_mode is not None:
        torch._dynamo.reset()
        cache = execution.cache_state()  # before compiling: was the cache warm?
        before = execution.DynamoCounts.now()
        prepared.fn = execution.compiled(_as_function(fn), inductor_mode, dynamic=False)
        compile_s = execution.first_step(
            lambda: _one_step(prepared.fn, args, kwargs, backward, leaves), (), sync, mode,
            is_oom)
        after = execution.DynamoCounts.now()
        prepared.counts = after
        prepared.facts = {"mode": mode, "compile_time_s": compile_s,
                          "graphs": after.graphs - before.graphs,
                          "graph_breaks": after.graph_breaks - before.graph_breaks}
        if cache is not None:
            prepared.facts.update(inductor_cache_dir=cache["dir"],
                                  inductor_cache_warm=cache["warm"])
    if mode in CAPTURE_MODES:
        if not cuda:
            raise ValueError(f"compile {mode} captures CUDA graphs: a cuda device only")
        capture(prepared, backward, device)
    return prepared


def capture(prepared: Prepared, backward: bool, device: torch.device) -> None:
    """Capture the forward (and backward) in CUDA graphs, as PARAM's --cuda-graph: the
    loops then replay them. The graphs' outputs and gradients live in static buffers that
    each replay overwrites, so leaf gradients are not reset between iterations."""
    fn, args, kwargs, leaves = prepared.fn, prepared.args, prepared.kwargs, prepared.leaves
    start = time.perf_counter()
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(CAPTURE_WARMUP_CALLS):
            _one_step(fn, args, kwargs, backward, leaves)
    torch.cuda.current_stream(device).wait_stream(side)
    torch.cuda.synchronize(device)
    forward_graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(forward_graph):
        static_out = fn(*args, **kwargs)
    backward_graph = None
    targets = grad_targets(static_out) if backward else []
    if targets:
        grads = [torch.ones_like(t) for t in targets]
        for leaf in leaves:
            leaf.grad = None
        backward_graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(backward_graph, pool=forward_graph.pool()):
            # retain_graph: the captured kernels read the forward's saved tensors, which
            # each forward replay refreshes.
            torch.autograd.backward(targets, grads, retain_graph=True)
    torch.cuda.synchronize(device)

    def replay_forward(*_args: Any, **_kwargs: Any) -> Any:
        forward_graph.replay()
        return static_out

    def replay_backward(_targets: list[torch.Tensor], _grads: list[torch.Tensor]) -> None:
        if backward_graph is not None:
            backward_graph.replay()

    prepared.fn, prepared.args, prepared.kwargs = replay_forward, [], {}
    prepared.backward = replay_backward
    prepared.leaves = []  # the captured backward writes the same gradient buffers each time
    prepared.facts = {**prepared.facts, "mode": prepared.facts.get("mode", "cudagraphs"),
                      "capture_time_s": time.perf_counter() - start,
                      "captured_backward": backward_graph is not None}


def _flat(output: Any) -> torch.Tensor:
    tensors = [t.detach().flatten().to(torch.float64) for t in tensors_in([output])]
    return torch.cat(tensors) if tensors else torch.zeros(0, dtype=torch.float64)


def _precision_of(output: Any) -> str:
    names = {torch.float64: "float64", torch.float16: "float16", torch.bfloat16: "bfloat16"}
    for t in tensors_in([output]):
        if t.is_floating_point():
            return names.get(t.dtype, "float32")
    return "float32"


def accuracy(prepared: Prepared, fn: Callable[..., Any], args: list[Any],
             kwargs: dict[str, Any]) -> dict[str, Any]:
    """The input's output as measured (compiled or replayed) against the eager operator's
    on the same input, held to the output dtype's tolerance (dlbench.pytorch.accuracy)."""
    measured = _flat(prepared.call()).cpu()
    reference = fn(*args, **kwargs)
    expected = _flat(reference).cpu()
    if not expected.numel():  # nothing to compare (no tensor output)
        return {}
    return verdict(compare(measured, expected), _precision_of(reference))
