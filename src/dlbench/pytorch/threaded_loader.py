"""Batches decoded by a pool of threads, in the runner's own process.

torchvision's JPEG decoder and resize release the GIL, so loader threads decode side by
side without what DataLoader worker processes pay per batch: a fresh shared-memory tensor
and its page faults, and the copy between processes. On 2 cores, 2 threads reached 0.98
(image folder) and 1.00 (encoded LMDB) of the bare decode+crop rate where 2 worker
processes reached 0.89 and 0.90 (benchmarks/data_loaders.py).

Samples are written into a small ring of reused batch tensors (pinned on GPU hosts): a
yielded batch stays valid until two more have been drawn, which the runner's
copy-and-convert step (``dlbench.pytorch.data.RealImages``) never outlives.

Which thread decodes a sample depends on scheduling, so random augmentation must not draw
from a generator the threads share: given ``seed``, each sample gets its own random numbers
from (seed, epoch, sample index), through the dataset's ``load(index, rng)``; the batches
are then the same whatever the number of threads or their timing.

Two things keep the threads' CPU time on decoding (measured on 2 cores, 2 threads, image
folder: 0.86 of the bound before, 0.95 after): each thread's torch ops run on that thread
alone, since an image is too small to split and an OpenMP team per thread oversubscribes
the cores the other threads decode on; and a batch is handed out in a few chunks of
samples, not one task per sample.
"""

from __future__ import annotations

import collections
import ctypes
import math
import random
from collections.abc import Callable, Iterator, Sized
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch
from torch.utils.data import BatchSampler, Dataset, Sampler

PREFETCH_BATCHES = 2
CHUNKS_PER_THREAD = 4  # per batch: few tasks, yet a slow image does not idle a thread


def _one_intraop_thread() -> None:
    """Make torch ops called from this thread run on it alone.

    torch.set_num_threads is process-wide (the model's own ops need every core), but
    OpenMP's thread count is per calling thread: set it for this thread only, after
    torch's lazy per-thread initialisation, which would otherwise reset it. Builds without
    OpenMP (torch's native pool) keep their default."""
    torch.get_num_threads()  # torch's per-thread OpenMP set-up happens here, first
    omp_set_num_threads = getattr(ctypes.CDLL(None), "omp_set_num_threads", None)
    if omp_set_num_threads is not None:
        omp_set_num_threads(1)


def sample_rng(seed: int, epoch: int, index: int) -> random.Random:
    """The random numbers of sample ``index`` in ``epoch``: the same crop and flip however
    threads are scheduled or how many there are (each field is below 2**64)."""
    mask = (1 << 64) - 1
    return random.Random(((seed & mask) << 128) | ((epoch & mask) << 64) | (index & mask))


class ThreadedLoader:
    def __init__(self, dataset: Dataset, *, sampler: Sampler[int], batch_size: int,
                 threads: int, drop_last: bool, sample_shape: tuple[int, ...],
                 pin_memory: bool = False, seed: int | None = None):
        self.dataset = dataset
        # Per-sample random numbers where the dataset takes them (module docstring).
        self._load: Callable[..., Any] | None = getattr(dataset, "load", None) \
            if seed is not None else None
        self.seed = seed
        self._epoch = -1  # the number of iterations started, less one
        self.sampler = sampler  # DistributedSampler.set_epoch is called through this
        self.batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.threads = threads
        ring = PREFETCH_BATCHES + 2
        pin = pin_memory and torch.cuda.is_available()
        self._buffers = [torch.empty((batch_size, *sample_shape), dtype=torch.uint8,
                                     pin_memory=pin) for _ in range(ring)]
        self._chunk = max(1, math.ceil(batch_size / max(threads * CHUNKS_PER_THREAD, 1)))
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="dlbench-loader",
                                        initializer=_one_intraop_thread) \
            if threads > 0 else None

    def __len__(self) -> int:
        return len(self.batch_sampler) if isinstance(self.sampler, Sized) else 0

    def _fill(self, images: torch.Tensor, labels: torch.Tensor, first: int,
              indices: list[int], epoch: int) -> None:
        """Samples ``indices`` into rows ``first``, ``first + 1``, ... of the batch."""
        for j, index in enumerate(indices, start=first):
            if self._load is None:
                image, label = self.dataset[index]
            else:
                image, label = self._load(index, sample_rng(self.seed, epoch, index))
            images[j].copy_(image)
            labels[j] = label

    def _start(self, slot: int, indices: list[int], epoch: int
               ) -> tuple[torch.Tensor, torch.Tensor, list[Future[None]]]:
        images = self._buffers[slot % len(self._buffers)][:len(indices)]
        labels = torch.empty(len(indices), dtype=torch.int64)
        if self._pool is None:  # no threads: decode here, when the batch is asked for
            self._fill(images, labels, 0, indices, epoch)
            return images, labels, []
        futures = [self._pool.submit(self._fill, images, labels, j, indices[j:j + self._chunk],
                                     epoch)
                   for j in range(0, len(indices), self._chunk)]
        return images, labels, futures

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        self._epoch += 1
        epoch = self._epoch
        batches = iter(self.batch_sampler)
        pending: collections.deque[Any] = collections.deque()
        slot = 0
        for indices in batches:
            pending.append(self._start(slot, indices, epoch))
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
                    pending.append(self._start(slot, following, epoch))
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
