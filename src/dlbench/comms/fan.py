"""PARAM's incast and multicast (``collective: incast | multicast``): every sender's
message to the root at once, or the root's message to every receiver, as point-to-point
messages (dlbench.comms.sizes.fan_peers says which ranks). What each rank issues is one
batch of isend/irecv (one NCCL group), built before any timing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Fan:
    """An incast's or multicast's ranks: this one, the root, and the root's peers (the
    senders of an incast, the receivers of a multicast)."""

    rank: int
    root: int
    peers: tuple[int, ...]


class Works:
    """The work handles of one batch of point-to-point messages, waited for as one."""

    def __init__(self, works: list[Any]) -> None:
        self.works = works

    def wait(self) -> None:
        for work in self.works:
            work.wait()


def call(collective: str, buffers: tuple, fan: Fan, async_op: bool) -> Any:
    """PARAM's incast (every sender's message to the root, into its row of the root's
    buffer) and multicast (the root's message to every receiver): each rank's messages one
    batch of isend/irecv (one NCCL group), issued at once; a rank outside them issues
    nothing. What a step issues is built here, before any timing."""
    import torch.distributed as dist

    source, target = buffers
    ops: list[Any] = []
    if collective == "incast" and fan.rank == fan.root:
        ops = [dist.P2POp(dist.irecv, target[j], peer) for j, peer in enumerate(fan.peers)]
    elif collective == "incast" and fan.rank in fan.peers:
        ops = [dist.P2POp(dist.isend, source, fan.root)]
    elif fan.rank == fan.root:
        ops = [dist.P2POp(dist.isend, source, peer) for peer in fan.peers]
    elif fan.rank in fan.peers:
        ops = [dist.P2POp(dist.irecv, target, fan.root)]

    def issue(_: Any) -> Works:
        return Works(dist.batch_isend_irecv(ops) if ops else [])

    if async_op:
        return issue
    return lambda batch: issue(batch).wait()


def buffers(collective: str, count: int, make: Any, empty: Any, fan: Fan) -> tuple:
    """A size's buffers on this rank: the message it sends, and where it receives (an
    incast's root: a row per sender; a multicast's receivers: the message; else None)."""
    rows = len(fan.peers) if collective == "incast" and fan.rank == fan.root else (
        1 if collective == "multicast" and fan.rank in fan.peers else 0)
    target = empty(rows, count) if rows else None
    return make(count), (target[0] if collective == "multicast" and rows else target)
