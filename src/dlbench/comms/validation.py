"""Data validation of a collective (PARAM's ``--c 1``): after a message size is timed, every
rank fills its buffers with a known pattern, the collective runs once more, and each rank
checks what it received against what the collective must give. A link, a driver or a
library that corrupts or misroutes data then fails the cell instead of giving a bandwidth.

The patterns are small whole numbers that depend on the rank and the element's place, so
that a sum, a chunk in the wrong place or a chunk from the wrong rank each show: every
value is at most 16, or 1.5 x ranks for the reductions, which float16, bfloat16 and
float32 hold exactly (bfloat16 up to 170 ranks) and int8 up to 84 ranks
(``MAX_INT8_RANKS``). Nothing here runs inside a timed region.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# int8 holds the largest all_reduce or reduce_scatter value, 1.5 x ranks, up to 127.
MAX_INT8_RANKS = 84
_PERIOD = 16  # values of the gather, scatter and broadcast patterns: 1 .. 16


def _pattern(collective: str, count: int, rank: int, ranks: int) -> Any:
    """What ``rank`` sends: a float64 tensor of the input's elements (on the CPU)."""
    import torch

    chunk = count // ranks
    if collective == "all_gather":
        return ((rank + torch.arange(chunk)) % _PERIOD + 1).double()
    i = torch.arange(count)
    if collective in ("all_reduce", "reduce"):  # odd ranks add one at odd elements
        return (1 + (i % 2) * (rank % 2)).double()
    if collective == "broadcast":
        return (i % _PERIOD + 1).double() if rank == 0 else torch.zeros(count).double()
    if collective == "reduce_scatter":
        block, k = i // chunk, i % chunk
        return (1 + ((block + k) % 2) * (rank % 2)).double()
    # all_to_all: block j goes to rank j.
    block, k = i // chunk, i % chunk
    return ((rank + 2 * block + k) % _PERIOD + 1).double()


def expected(collective: str, count: int, rank: int, ranks: int) -> Any:
    """What ``rank``'s result buffer must hold afterwards (float64, on the CPU)."""
    import torch

    chunk = count // ranks
    odd_ranks = ranks // 2  # those adding one where the pattern says so
    if collective in ("all_reduce", "reduce"):  # reduce: on rank 0, the one checked
        return (ranks + (torch.arange(count) % 2) * odd_ranks).double()
    if collective == "broadcast":
        return (torch.arange(count) % _PERIOD + 1).double()
    if collective == "reduce_scatter":
        return (ranks + ((rank + torch.arange(chunk)) % 2) * odd_ranks).double()
    i = torch.arange(count)
    source, k = i // chunk, i % chunk
    if collective == "all_gather":
        return ((source + k) % _PERIOD + 1).double()
    return ((source + 2 * rank + k) % _PERIOD + 1).double()  # all_to_all


def fill(collective: str, buffers: tuple, rank: int, ranks: int) -> None:
    """Put the pattern into the input buffer and clear the output one (in place)."""
    source, target = buffers
    source.copy_(_pattern(collective, _count(collective, source, ranks), rank, ranks))
    if target is not None:
        target.zero_()


def _count(collective: str, source: Any, ranks: int) -> int:
    """The measured buffer's elements (all_gather's input is one rank's chunk of it)."""
    return source.numel() * ranks if collective == "all_gather" else source.numel()


def result_buffer(collective: str, buffers: tuple) -> Any:
    source, target = buffers
    return source if target is None else target


@dataclass(frozen=True)
class Check:
    """One rank's verdict on one size: how many elements were wrong, and the first."""

    rank: int
    wrong: int
    elements: int
    first: int = -1
    got: float = 0.0
    want: float = 0.0


def check(collective: str, buffers: tuple, rank: int, ranks: int) -> Check:
    """Compare ``rank``'s result buffer with what the collective must give. Whole numbers
    of the data type are compared exactly; floating types with a margin of ``ranks``
    units in the last place (a reduction's order may round differently)."""
    import torch

    source, _ = buffers
    if collective == "reduce" and rank != 0:
        return Check(rank, 0, 0)  # only the root receives; the others' buffers are scratch
    result = result_buffer(collective, buffers)
    want = expected(collective, _count(collective, source, ranks), rank, ranks)
    got = result.detach().to("cpu", torch.float64)
    if result.dtype.is_floating_point:
        margin = torch.finfo(result.dtype).eps * ranks * want.abs()
        bad = (got - want).abs() > margin
    else:
        bad = got != want
    wrong = int(bad.sum())
    if not wrong:
        return Check(rank, 0, got.numel())
    first = int(bad.nonzero()[0, 0])
    return Check(rank, wrong, got.numel(), first, float(got[first]), float(want[first]))


def verdict(collective: str, size_text: str, checks: list[Check]) -> str | None:
    """One line naming what went wrong on which ranks; None when every rank got the
    right values."""
    failed = [c for c in checks if c.wrong]
    if not failed:
        return None
    c = failed[0]
    return (f"{collective} {size_text}: data validation failed on {len(failed)} of "
            f"{len(checks)} rank(s): rank {c.rank} received {c.wrong} of {c.elements} "
            f"elements wrong (first at element {c.first}: {c.got:g} instead of {c.want:g})")
