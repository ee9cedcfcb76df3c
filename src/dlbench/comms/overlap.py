"""Collectives overlapped with computation (``compute_kernel``, PARAM's ``--mode
comms-compute --kernel K --num-compute N --mm-dim D --comp-data-type T``).

Each measured iteration issues the size's collectives (one, or ``window`` of them when
non-blocking) without waiting, then ``num_compute`` compute kernels on ``mm_dim`` x
``mm_dim`` elements, or the shape ``mm_shape`` gives (PARAM's ``--mm-dim m n p``: a GEMM of
A[m,n] and B[n,p], the other kernels' m x n operands), and waits for both. The kernels are
PARAM's: a GEMM; an elementwise add or sub of two operands, a + 2b and a - 2b as PARAM's;
add_num or sub_num of one and 20 (PARAM's sub_num adds it, which its name says it does
not); a copy on the device; d2h or h2d, a copy to or from a pinned host buffer, the traffic
a training step's offloading or input pipeline puts beside its collectives; emb_lookup, a
recommendation model's embedding lookup (``Tables``: ``tables`` tables of ``rows`` x
``dim`` float32, ``batch`` bags of ``bag`` rows each, summed), the memory-bound gathers a
DLRM step overlaps with its all_to_all. PARAM's lookup is FBGEMM's table-batched kernel;
here it is PyTorch's ``embedding_bag`` over the tables side by side, one call for all of
them as FBGEMM's is (its default, every table batched), forward only, indices uniform over
each table's rows. PARAM's d2h and h2d allocate their destination in every run (d2h in
pageable memory, which makes the copy wait); here both buffers are made once, the host one
pinned. On a GPU the kernels run on a stream of their own beside NCCL's, as a training step
overlaps its gradients' all_reduce with the backward pass; on a CPU they run on the rank's
thread while gloo's threads communicate. Each part is timed on its own inside the iteration
(CUDA events on its stream; on the host, the clock, the collectives' end by their futures'
callbacks), so a cell answers both questions of an overlap: how much slower the collective
runs beside the computation (its bandwidth, against a cell without a compute kernel), and
how much slower the computation runs beside the collective (its time against the same
kernels alone, measured in the same process before the sweep).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

EMBEDDING = "emb_lookup"  # the kernel shaped by Tables, not by mm_dim or mm_shape
KERNELS = ("gemm", "add", "sub", "add_num", "sub_num", "copy", "d2h", "h2d", EMBEDDING)
NUMBER = 20  # what add_num and sub_num add or take away (PARAM's)
ALPHA = 2  # add and sub scale their second operand by it (PARAM's alpha=2)
NO_KERNEL = "none"  # the compute_kernel of a collective timed on its own
COMPUTE_DATA_TYPES = ("float32", "float16", "bfloat16", "float64")


@dataclass(frozen=True)
class Kernel:
    """One compute kernel on buffers made once for the cell."""

    name: str
    run: Callable[[], None]
    flops: float  # floating-point operations of one run (0 for a copy)
    # bytes one run reads and writes (the minimum: each operand once); a transfer between
    # host and device: the bytes crossing the link
    bytes: float
    # the operands: a GEMM's (m, n, p), A[m,n] times B[n,p]; the other kernels' (m, n)
    shape: tuple[int, ...] = ()


@dataclass(frozen=True)
class Tables:
    """The embedding lookup's tables and bags (PARAM's --emb-dim, --num-embs,
    --num-emb-tables-per-device, --batch-size, --bag-size, with PARAM's defaults)."""

    dim: int = 128
    rows: int = 100_000
    tables: int = 8
    batch: int = 512
    bag: int = 20


# How many of PARAM's --mm-dim values a kernel takes beside one (a square): a GEMM's
# m n p (A[m,n] B[n,p]), add's and sub's m n; the other kernels take two or three and use
# the first two, as PARAM does.
SHAPE_VALUES = {"gemm": (3,), "add": (2,), "sub": (2,)}
OTHER_SHAPE_VALUES = (2, 3)


def shape_values(text: str) -> list[int]:
    """``mm_shape``'s values ("4096,8192,1024"); none for an empty one."""
    return [int(v) for v in text.split(",")] if text.strip() else []


def shape_form_problem(text: str) -> str | None:
    """Why ``text`` is no ``mm_shape`` (two or three positive integers, comma-separated),
    or None."""
    if not text.strip():
        return None
    try:
        values = shape_values(text)
    except ValueError:
        return f"{text!r} is not two or three comma-separated integers (m,n or m,n,p)"
    if len(values) not in (2, 3):
        return (f"{text!r} has {len(values)} value(s): give m,n or m,n,p (one size is "
                "mm_dim's)")
    if min(values) < 1:
        return f"{text!r}: every value must be >= 1"
    return None


def operands(name: str, dim: int, shape: str = "") -> tuple[int, int, int]:
    """(m, n, p) of kernel ``name``: a GEMM multiplies A[m,n] by B[n,p], the other kernels
    take m x n operands (p unused). ``shape`` (``mm_shape``) where given, else ``dim``
    squared. A count of values PARAM refuses for the kernel raises ValueError."""
    problem = shape_form_problem(shape)
    if problem:
        raise ValueError(problem)
    values = shape_values(shape)
    if not values:
        return dim, dim, dim
    takes = SHAPE_VALUES.get(name, OTHER_SHAPE_VALUES)
    if len(values) not in takes:
        form = {"gemm": "m,n,p (A[m,n] times B[n,p])", "add": "m,n", "sub": "m,n"}[name]
        raise ValueError(f"{name} takes {form}, got {shape!r}")
    m, n = values[:2]
    return m, n, values[2] if len(values) == 3 else n


def kernel(name: str, dim: int, data_type: str, device: Any, shape: str = "",
           tables: Tables | None = None) -> Kernel:
    """``name`` on ``dim`` x ``dim`` operands of ``data_type`` (or those ``shape`` gives:
    ``operands``), written into a buffer made here, so that a run allocates nothing; the
    embedding lookup on ``tables`` (PARAM's defaults when None)."""
    if name not in KERNELS:
        raise ValueError(f"unknown compute kernel {name!r} (valid: {', '.join(KERNELS)})")
    if name == EMBEDDING:
        return embedding_lookup(tables or Tables(), device)
    m, n, p = operands(name, dim, shape)
    built = _built(name, m, n, p, data_type, device)
    return dataclasses.replace(built, shape=(m, n, p) if name == "gemm" else (m, n))


def _built(name: str, m: int, n: int, p: int, data_type: str, device: Any) -> Kernel:
    import torch

    dtype = getattr(torch, data_type)
    element = torch.empty((), dtype=dtype).element_size()
    if name == "gemm":
        a = torch.rand(m, n, dtype=dtype, device=device)
        b = torch.rand(n, p, dtype=dtype, device=device)
        out = torch.empty(m, p, dtype=dtype, device=device)
        return Kernel(name, lambda: torch.matmul(a, b, out=out), 2.0 * m * n * p,
                      float(m * n + n * p + m * p) * element)
    a, b = (torch.rand(m, n, dtype=dtype, device=device) for _ in range(2))
    out = torch.empty(m, n, dtype=dtype, device=device)
    square = float(m * n)  # the elements of one operand
    if name in ("add", "sub"):  # PARAM's a + 2b and a - 2b: a multiply and an add each
        op = torch.add if name == "add" else torch.sub
        return Kernel(name, lambda: op(a, b, alpha=ALPHA, out=out), 2 * square,
                      3 * square * element)
    if name in ("add_num", "sub_num"):
        op = torch.add if name == "add_num" else torch.sub
        return Kernel(name, lambda: op(a, NUMBER, out=out), square, 2 * square * element)
    if name == "copy":
        return Kernel(name, lambda: out.copy_(a), 0.0, 2 * square * element)
    if name in ("d2h", "h2d"):
        # Pinned (page-locked) where there is a GPU, so that the copy is an asynchronous
        # DMA on the kernels' stream.
        host = torch.empty(m, n, dtype=dtype, pin_memory=device.type == "cuda")
        if name == "d2h":
            return Kernel(name, lambda: host.copy_(a, non_blocking=True), 0.0,
                          square * element)
        host.copy_(a)
        return Kernel(name, lambda: out.copy_(host, non_blocking=True), 0.0,
                      square * element)
    raise AssertionError(f"kernel {name!r} listed in KERNELS but not built")


def lookup_inputs(spec: Tables, device: Any) -> tuple[Any, Any, Any]:
    """The tables side by side (``tables`` x ``rows`` rows of ``dim``), each bag's row
    indices (table t's drawn uniformly from its own rows) and the bags' offsets, with the
    last one's end (embedding_bag's include_last_offset): the same on every run."""
    import torch

    # The tables made where they are used (gigabytes: no host copy first), the indices on
    # the host and moved.
    weight = torch.rand(spec.tables * spec.rows, spec.dim, device=device,
                        generator=torch.Generator(device=device).manual_seed(0))
    per_table = torch.randint(0, spec.rows, (spec.tables, spec.batch * spec.bag),
                              generator=torch.Generator().manual_seed(1))
    first_rows = torch.arange(spec.tables).unsqueeze(1) * spec.rows
    indices = (per_table + first_rows).reshape(-1).to(device)
    offsets = torch.arange(0, spec.tables * spec.batch * spec.bag + 1, spec.bag).to(device)
    return weight, indices, offsets


def embedding_lookup(spec: Tables, device: Any) -> Kernel:
    """Every table's ``batch`` bags of ``bag`` rows summed, in one ``embedding_bag`` call
    over the tables side by side (each table's indices offset into its own rows). Its
    FLOPs: an add per element of each row gathered; its bytes: the rows gathered, the
    indices and the pooled output (the minimum a lookup moves). Its output is the one
    allocation of a run (embedding_bag writes a new tensor)."""
    import torch.nn.functional as F

    weight, indices, offsets = lookup_inputs(spec, device)
    gathered = spec.tables * spec.batch * spec.bag  # rows read
    element = weight.element_size()
    return Kernel(EMBEDDING,
                  lambda: F.embedding_bag(indices, weight, offsets, mode="sum",
                                          include_last_offset=True),
                  float(gathered * spec.dim),
                  float(gathered * spec.dim * element + indices.numel() * indices.element_size()
                        + spec.tables * spec.batch * spec.dim * element),
                  (spec.tables, spec.rows, spec.dim))


def compute_step(work: Kernel, count: int) -> Callable[[Any], None]:
    """What the timed region of the computation alone runs: ``count`` kernels."""

    def step(_: Any) -> None:
        for _ in range(count):
            work.run()

    return step


class Overlapped:
    """The step of an overlapped iteration, and the spans of its two parts.

    ``issue(batch)`` starts one collective and returns its work handle; ``per_iteration``
    of them are issued, then ``count`` runs of ``work``. ``iterations`` bounds the steps
    (warmup and measured): the CUDA events are made before the first, outside any timing.
    On a GPU the current stream is held while the host launches both parts
    (``harness.StreamHold``), so that neither part's events time the launch, and the
    iteration too is timed by events (``iterations``), from the same start to the end of
    both parts.
    """

    def __init__(self, issue: Callable[[Any], Any], per_iteration: int, work: Kernel,
                 count: int, device: Any, iterations: int) -> None:
        import torch

        self._issue, self._per_iteration = issue, per_iteration
        self._work, self._count = work, count
        self._cuda = device.type == "cuda"
        self.collective: list[tuple[Any, Any]] = []  # (start, end) of each step's part
        self.compute: list[tuple[Any, Any]] = []
        self.whole: list[tuple[Any, Any]] = []  # a GPU's: (start, end of both parts)
        if self._cuda:
            from dlbench import harness

            self._stream = torch.cuda.Stream(device)
            self._events = [[torch.cuda.Event(enable_timing=True) for _ in range(5)]
                            for _ in range(iterations)]
            self._hold = harness.StreamHold()

    def step(self, batch: Any) -> None:
        if self._cuda:
            self._device_step(batch)
        else:
            self._host_step(batch)

    def _device_step(self, batch: Any) -> None:
        import torch

        current = torch.cuda.current_stream()
        start, end, compute_start, compute_end, both_end = self._events[len(self.collective)]
        self._hold.hold()  # both parts queue behind it while the host launches them
        start.record(current)
        began = time.perf_counter()
        self._stream.wait_stream(current)  # both parts start from the same point
        works = [self._issue(batch) for _ in range(self._per_iteration)]
        with torch.cuda.stream(self._stream):
            compute_start.record()
            for _ in range(self._count):
                self._work.run()
            compute_end.record()
        for work in works:
            work.wait()  # the current stream waits for NCCL's
        end.record(current)
        current.wait_stream(self._stream)
        both_end.record(current)
        self._hold.launched(time.perf_counter() - began)
        self.collective.append((start, end))
        self.compute.append((compute_start, compute_end))
        self.whole.append((start, both_end))

    def _host_step(self, batch: Any) -> None:
        clock = time.perf_counter
        ends: list[float] = []
        start = clock()
        works = [self._issue(batch) for _ in range(self._per_iteration)]
        # A collective's end is when gloo completes it, stamped by its future's callback
        # (the chained future is done once the stamp is taken).
        stamped = [w.get_future().then(lambda _: ends.append(clock())) for w in works]
        compute_start = clock()
        for _ in range(self._count):
            self._work.run()
        compute_end = clock()
        for future in stamped:
            future.wait()
        self.collective.append((start, max(ends)))
        self.compute.append((compute_start, compute_end))

    def times(self, measured: int) -> tuple[list[float], list[float]]:
        """Seconds of the collectives' part and of the computation's in each of the last
        ``measured`` steps (the device synchronised since)."""

        def seconds(spans: list[tuple[Any, Any]]) -> list[float]:
            spans = spans[len(spans) - measured:]
            if self._cuda:
                return [a.elapsed_time(b) / 1e3 for a, b in spans]
            return [b - a for a, b in spans]

        return seconds(self.collective), seconds(self.compute)

    def iterations(self, measured: int) -> list[float] | None:
        """A GPU's: seconds of each of the last ``measured`` steps by their events, from the
        start to the end of both parts (the hold before them left out); None on a CPU,
        whose steps the timed loop's clock times."""
        if not self._cuda:
            return None
        spans = self.whole[len(self.whole) - measured:]
        return [a.elapsed_time(b) / 1e3 for a, b in spans]

    def facts(self, measured: int) -> dict[str, Any]:
        """A GPU's: the stream's hold before the last ``measured`` steps (StreamHold)."""
        return self._hold.facts(measured) if self._cuda else {}
