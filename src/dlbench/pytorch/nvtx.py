"""NVTX ranges that profilers (nsys, ncu) use to find warmup, measure and each batch."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

_ENABLED = torch.cuda.is_available()


def push(name: str) -> None:
    if _ENABLED:
        torch.cuda.nvtx.range_push(name)


def pop() -> None:
    if _ENABLED:
        torch.cuda.nvtx.range_pop()


@contextlib.contextmanager
def nvtx_range(name: str) -> Iterator[None]:
    push(name)
    try:
        yield
    finally:
        pop()
