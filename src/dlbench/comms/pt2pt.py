"""Point-to-point tests of a collective cell (``collective: pt2pt``, PARAM's ``--pt2pt``):
what each rank runs in one measured iteration of a message size, between the ranks that
``sizes.pt2pt_pairs`` pairs (ranks without a peer run nothing, and time nothing).

- ``latency``: a ping-pong, the sender's message and the receiver's answer, each waited
  for (blocking send and recv); the time recorded is half the round trip, one message's
  way from one GPU to the other (osu_latency's figure).
- ``unidirectional``: the sender issues ``window`` messages at once (one batch of isend,
  the receiver one of irecv), waits for them, and the receiver answers with one element,
  so the time ends when the last message has arrived (osu_bw's window); one message's
  time is the window's divided by ``window``.
- ``bidirectional``: both ranks send ``window`` messages and receive as many at once;
  each message time moves two messages, one each way (osu_bibw).

A batch of isend and irecv is one NCCL group (``batch_isend_irecv``): the sends of one
rank and the receives of the other run together instead of one after the other, and the
two directions of ``bidirectional`` cannot wait on each other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

TESTS = ("latency", "unidirectional", "bidirectional")


@dataclass(frozen=True)
class Test:
    """One timed test of a message size (a collective's, too: pass "collective")."""

    pass_: str  # the measurement's pass: one of TESTS, or "collective"
    step: Callable[[Any], None]  # one measured iteration
    per_iteration: int  # operations (latency: ways) an iteration's time is shared among
    messages: int  # messages of the size one operation moves (bidirectional: 2)
    # A collective overlapped with computation: the step, and the spans of its parts
    # (dlbench.comms.overlap.Overlapped); None for every other test.
    overlapped: Any = None
    # A collective timed by CUDA events (harness.DeviceTimedStep, also its step).
    device_timed: Any = None
    # Its warm-up and measured iterations where not the cell's (--w, --n): a CUDA graph's
    # replays (dlbench.comms.graphs).
    counts: tuple[int, int] | None = None


def shares(window: int) -> list[tuple[str, int, int]]:
    """Each test's (pass, what an iteration's time is divided by, messages of the size
    each share moves): a ping-pong's two ways, a window's messages."""
    return [("latency", 2, 1), ("unidirectional", window, 1), ("bidirectional", window, 2)]


def tests(buffers: tuple, peer: int | None, sender: bool, window: int) -> list[Test]:
    """The three tests of a size on buffers ``(message, received)``. What a step issues is
    built before it: inside it, only the transfers and their waits."""
    import torch
    import torch.distributed as dist

    message, received = buffers
    ack = torch.zeros(1, dtype=message.dtype, device=message.device)

    def ops(op: Callable, tensor: Any) -> list[Any]:
        if peer is None:  # a rank outside the pairs issues nothing
            return []
        return [dist.P2POp(op, tensor, peer, tag=w) for w in range(window)]

    def run(batch: list[Any]) -> None:
        for work in dist.batch_isend_irecv(batch):
            work.wait()

    sends, receives = ops(dist.isend, message), ops(dist.irecv, received)
    both = sends + receives

    def ping_pong(_: Any) -> None:
        if sender:
            dist.send(message, peer)
            dist.recv(received, peer)
        else:
            dist.recv(received, peer)
            dist.send(message, peer)

    def unidirectional(_: Any) -> None:
        if sender:
            run(sends)
            dist.recv(ack, peer)
        else:
            run(receives)
            dist.send(ack, peer)

    def bidirectional(_: Any) -> None:
        run(both)

    def idle(_: Any) -> None:
        return None

    steps = (ping_pong, unidirectional, bidirectional) if peer is not None else (idle,) * 3
    return [Test(name, step, per_iteration, messages) for (name, per_iteration, messages), step
            in zip(shares(window), steps, strict=True)]


def exchange(buffers: tuple, peer: int | None) -> None:
    """Both ranks of a pair send their message and receive the other's, once (the data
    validation's transfer, outside any timing)."""
    import torch.distributed as dist

    if peer is None:
        return
    message, received = buffers
    for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, message, peer),
                                        dist.P2POp(dist.irecv, received, peer)]):
        work.wait()
