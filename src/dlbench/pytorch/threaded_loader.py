"""Batches decoded by a pool of threads, in the runner's own process.

torchvision's JPEG decoder and resize release the GIL, so loader threads decode side by
side without what DataLoader worker processes pay per batch: a fresh shared-memory tensor
and its page faults, and the copy between processes. On 2 cores this reached 0.92-0.98 of
the bare decode+crop rate where 2 worker processes reached 0.82-0.85
(benchmarks/data_loaders.py).

Samples are written into a small ring of reused batch tensors (pinned on GPU hosts): a
yielded batch stays valid until two more have been drawn, which the runner's
copy-and-convert step (``dlbench.pytorch.data.RealImages``) never outlives.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator, Sized
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch
from torch.utils.data import BatchSampler, Dataset, Sampler

PREFETCH_BATCHES = 2


class ThreadedLoader:
    def __init__(self, dataset: Dataset, *, sampler: Sampler[int], batch_size: int,
                 threads: int, drop_last: bool, sample_shape: tuple[int, ...],
                 pin_memory: bool = False):
        self.dataset = dataset
        self.sampler = sampler  # DistributedSampler.set_epoch is called through this
        self.batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.threads = threads
        ring = PREFETCH_BATCHES + 2
        pin = pin_memory and torch.cuda.is_available()
        self._buffers = [torch.empty((batch_size, *sample_shape), dtype=torch.uint8,
                                     pin_memory=pin) for _ in range(ring)]
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="dlbench-loader") \
            if threads > 0 else None

    def __len__(self) -> int:
        return len(self.batch_sampler) if isinstance(self.sampler, Sized) else 0

    def _fill(self, images: torch.Tensor, labels: torch.Tensor, j: int, index: int) -> None:
        image, label = self.dataset[index]
        images[j].copy_(image)
        labels[j] = label

    def _start(self, slot: int, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor,
                                                              list[Future[None]]]:
        images = self._buffers[slot % len(self._buffers)][:len(indices)]
        labels = torch.empty(len(indices), dtype=torch.int64)
        if self._pool is None:  # no threads: decode here, when the batch is asked for
            for j, index in enumerate(indices):
                self._fill(images, labels, j, index)
            return images, labels, []
        futures = [self._pool.submit(self._fill, images, labels, j, index)
                   for j, index in enumerate(indices)]
        return images, labels, futures

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        batches = iter(self.batch_sampler)
        pending: collections.deque[Any] = collections.deque()
        slot = 0
        for indices in batches:
            pending.append(self._start(slot, indices))
            slot += 1
            if len(pending) == PREFETCH_BATCHES:
                break
        try:
            while pending:
                images, labels, futures = pending.popleft()
                for future in futures:
                    future.result()  # a sample's error is raised here, as itself
                following = next(batches, None)
                if following is not None:
                    pending.append(self._start(slot, following))
                    slot += 1
                yield images, labels
        finally:
            for _, _, futures in pending:  # abandoned or failed: drop queued samples
                for future in futures:
                    future.cancel()
            for _, _, futures in pending:
                for future in futures:
                    if not future.cancelled():
                        future.exception()  # wait, so no thread writes into a reused buffer

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
