"""Data validation of a collective (PARAM's ``--c 1``): after a message size is timed, every
rank fills its buffers with a known pattern, the collective runs once more, and each rank
checks what it received against what the collective must give. A link, a driver or a
library that corrupts or misroutes data then fails the cell instead of giving a bandwidth.

The patterns are small whole numbers that depend on the rank and the element's place, so
that a sum, a chunk in the wrong place or a chunk from the wrong rank each show: every
value is at most 16, or ranks + ranks // 2 for the sums. While that is a whole number
the data type holds exactly (a sum's, up to 85 ranks in int8, 171 in bfloat16, 1,365 in
float16), every partial sum is exact in any order, so results are compared exactly: one
rank's contribution missing, or a result of zeros, shows at any rank count. Above it
validation is refused (``ranks_problem``, the study's and the command line's check). A
point-to-point pair exchanges messages holding its sender's pattern (``fill`` and
``check`` given the rank's peer), an incast's or multicast's messages their sender's (the
root's peers given). A collective with a root is filled and checked given it: the root's
pattern is the one a broadcast or scatter sends, and only the root receives a reduce or
gather (the others' buffers are not checked). An all_to_allv's blocks, even or not,
follow all_to_all's pattern, placed by the rank's splits.
Nothing here runs inside a timed region.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dlbench.comms.sizes import FAN, PIECE_IN, PIECE_OUT

# The largest whole number each data type holds with every one below it (a float's 2 to
# the power of its significand's bits; int8's 127); results are compared in float32, so
# no more than float32's for the wider types.
EXACT_UP_TO = {"int8": 127, "bfloat16": 2**8, "float16": 2**11, "float32": 2**24,
               "int32": 2**24, "float64": 2**24}
# The collectives that sum every rank's pattern.
SUMS = frozenset({"all_reduce", "reduce", "reduce_scatter"})
_PERIOD = 16  # values of the gather, scatter and broadcast patterns: 1 .. 16
# Elements filled or checked at a time, on the buffers' device: a 1 GiB buffer is checked
# with 64 MB of scratch, not a float copy of it.
CHUNK = 2**24


def largest(collective: str, ranks: int) -> int:
    """The largest value of ``collective``'s patterns among ``ranks`` processes: a sum's
    at odd elements (every rank's one, the odd ranks' one more), else the period's."""
    return max(_PERIOD, ranks + ranks // 2) if collective in SUMS else _PERIOD


def ranks_problem(collective: str, data_type: str, ranks: int) -> str | None:
    """Why ``collective`` among ``ranks`` processes in ``data_type`` cannot be validated:
    its sums outgrow the whole numbers the type holds exactly, so that a wrong sum could
    round to the right one; None when it can. The caller names its field or flag."""
    most = EXACT_UP_TO[data_type]
    if largest(collective, ranks) <= most:
        return None
    fit = (2 * most + 1) // 3  # the most ranks r with r + r // 2 <= most
    return (f"{collective} sums of {ranks} processes outgrow the whole numbers {data_type} "
            f"holds exactly (at most {fit} processes): validate with another data type")


def _message(i: Any, rank: int) -> Any:
    """The pattern ``rank`` sends at elements ``i`` where only its place and sender show."""
    return ((rank + i) % _PERIOD + 1).float()


def _blocks(i: Any, split: list[int]) -> tuple[Any, Any]:
    """For elements ``i`` of a buffer in blocks of ``split`` elements: each one's block and
    its place in it."""
    import torch

    sizes = torch.tensor(split, device=i.device)
    ends = sizes.cumsum(0)
    block = torch.bucketize(i, ends, right=True)
    return block, i - (ends - sizes)[block]


def _sent(collective: str, i: Any, rank: int, ranks: int, chunk: int, root: int = 0,
          split: list[int] | None = None) -> Any:
    """What ``rank`` sends at input elements ``i`` (float32; ``chunk``: the elements of
    one rank's share of the measured buffer; ``root``: the rank that broadcasts; ``split``:
    an all_to_allv's blocks to each rank)."""
    import torch

    if collective in ("all_gather", "gather", "pt2pt", *FAN):  # this rank's share; a message
        return _message(i, rank)
    if collective in ("all_reduce", "reduce"):  # odd ranks add one at odd elements
        return (1 + (i % 2) * (rank % 2)).float()
    if collective == "broadcast":
        return (i % _PERIOD + 1).float() if rank == root else torch.zeros_like(i).float()
    block, k = _blocks(i, split) if split is not None else (i // chunk, i % chunk)
    if collective == "reduce_scatter":
        return (1 + ((block + k) % 2) * (rank % 2)).float()
    if collective == "scatter" and rank != root:
        return torch.zeros_like(i).float()  # only the root's buffer is sent
    # all_to_all(v), and scatter from the root: block j to rank j
    return ((rank + 2 * block + k) % _PERIOD + 1).float()


def _received(collective: str, i: Any, rank: int, ranks: int, chunk: int,
              root: int = 0, split: list[int] | None = None) -> Any:
    """What ``rank``'s result buffer must hold at elements ``i`` (float32; ``split``: an
    all_to_allv's blocks from each rank)."""
    odd_ranks = ranks // 2  # those adding one where the pattern says so
    if collective in ("all_reduce", "reduce"):  # reduce: on the root, the one checked
        return (ranks + (i % 2) * odd_ranks).float()
    if collective == "broadcast":
        return (i % _PERIOD + 1).float()
    if collective == "reduce_scatter":
        return (ranks + ((rank + i) % 2) * odd_ranks).float()
    if collective == "scatter":  # the root's block for this rank
        return ((root + 2 * rank + i) % _PERIOD + 1).float()
    source, k = _blocks(i, split) if split is not None else (i // chunk, i % chunk)
    if collective in ("all_gather", "gather"):  # gather: on the root, the one checked
        return ((source + k) % _PERIOD + 1).float()
    return ((source + 2 * rank + k) % _PERIOD + 1).float()  # all_to_all(v)


def sent(collective: str, count: int, rank: int, ranks: int, root: int = 0) -> Any:
    """The whole input ``rank`` sends for a measured buffer of ``count`` elements."""
    import torch

    share = count // ranks if collective in PIECE_IN else count
    return _sent(collective, torch.arange(share), rank, ranks, count // ranks, root)


def expected(collective: str, count: int, rank: int, ranks: int, root: int = 0) -> Any:
    """The whole result ``rank`` must hold afterwards."""
    import torch

    size = count // ranks if collective in PIECE_OUT else count
    return _received(collective, torch.arange(size), rank, ranks, count // ranks, root)


def _spans(n: int):
    for start in range(0, n, CHUNK):
        yield start, min(n, start + CHUNK)


def fill(collective: str, buffers: tuple, rank: int, ranks: int, root: int = 0,
         splits: tuple[list[int], list[int]] | None = None) -> None:
    """Put the pattern into the input buffer and clear the output one (in place);
    ``root``: the rank that broadcasts; ``splits``: an all_to_allv's blocks on this rank."""
    import torch

    source, target = buffers
    chunk = _count(collective, source, ranks) // ranks
    split = splits[0] if splits is not None else None
    for start, stop in _spans(source.numel()):
        i = torch.arange(start, stop, device=source.device)
        source[start:stop].copy_(_sent(collective, i, rank, ranks, chunk, root, split))
    if target is not None:
        target.zero_()


def _count(collective: str, source: Any, ranks: int) -> int:
    """The measured buffer's elements (all_gather's input is one rank's chunk of it)."""
    return source.numel() * ranks if collective in PIECE_IN else source.numel()


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


def check(collective: str, buffers: tuple, rank: int, ranks: int,
          peer: int | None = None, root: int = 0,
          splits: tuple[list[int], list[int]] | None = None,
          peers: tuple[int, ...] = ()) -> Check:
    """Compare ``rank``'s result buffer with what the collective must give (pt2pt: what
    ``peer`` sent; reduce: only on ``root``; incast and multicast: given the root's
    ``peers``), a span at a time on its device, exactly (see the module's text)."""
    if collective == "pt2pt":
        return check_pt2pt(buffers, rank, peer)
    if collective in FAN:
        return check_fan(collective, buffers, rank, root, peers)

    source, _ = buffers
    if collective in ("reduce", "gather") and rank != root:
        return Check(rank, 0, 0)  # only the root receives; the others' buffers are scratch
    chunk = _count(collective, source, ranks) // ranks
    split = splits[1] if splits is not None else None
    return _compare(result_buffer(collective, buffers), rank,
                    lambda i: _received(collective, i, rank, ranks, chunk, root, split))


def check_pt2pt(buffers: tuple, rank: int, peer: int | None) -> Check:
    """What ``rank`` received from ``peer`` against the peer's pattern (a rank that takes
    no part has nothing to check)."""
    if peer is None:
        return Check(rank, 0, 0)
    return _compare(buffers[1], rank, lambda i: _message(i, peer))


def check_fan(collective: str, buffers: tuple, rank: int, root: int,
              peers: tuple[int, ...]) -> Check:
    """An incast's root: each row against the pattern of the sender it came from (a
    message from the wrong rank shows); a multicast's receivers: the root's pattern. The
    other ranks receive nothing."""
    import torch

    target = buffers[1]
    if target is None:
        return Check(rank, 0, 0)
    if collective == "multicast":
        return _compare(target, rank, lambda i: _message(i, root))
    count = target.shape[1]
    senders = torch.tensor(peers, device=target.device)
    return _compare(target.reshape(-1), rank,
                    lambda i: _message(i % count, senders[i // count]))


def _compare(result: Any, rank: int, want_at: Any) -> Check:
    """``result`` against ``want_at(elements)``, a span at a time on its device, exactly:
    the patterns' values and sums are whole numbers the type holds (``ranks_problem``), so
    no rounding can make a right result differ, and any margin would let a wrong one by."""
    import torch

    wrong, first = 0, None
    for start, stop in _spans(result.numel()):
        i = torch.arange(start, stop, device=result.device)
        want = want_at(i)
        got = result[start:stop].float()
        bad = got != want
        count = int(bad.sum())
        if count and first is None:
            at = int(bad.nonzero()[0, 0])
            first = (start + at, float(got[at]), float(want[at]))
        wrong += count
    if first is None:
        return Check(rank, 0, result.numel())
    return Check(rank, wrong, result.numel(), *first)


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
