"""Input for the timed loop: synthetic batches made once on the device, or real images.

A source is an endless iterator of ``(inputs, labels)`` already on the device, in the
dtype the model expects. Real datasets are decoded on the CPU by loader workers as uint8
and converted and normalised on the device, where that is cheapest.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import torch

from dlbench.cellrun import CellError
from dlbench.pytorch.zoo import BuiltModel

# ImageNet channel statistics, on the 0..255 scale of uint8 pixels.
_MEAN = (123.675, 116.28, 103.53)
_STD = (58.395, 57.12, 57.375)


def synthetic(built: BuiltModel, batch_size: int, device: torch.device, dtype: torch.dtype,
              seed: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """One batch generated on the device before timing starts, repeated."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    shape = (batch_size, *built.input_shape)
    if built.synthetic_batch is not None:
        inputs, labels = built.synthetic_batch(batch_size, device, dtype, gen)
        return itertools.repeat((inputs.to(device), labels.to(device)))
    if built.input_kind == "tokens":
        vocab = built.vocab_size or built.num_classes
        inputs = torch.randint(0, vocab, shape, generator=gen, dtype=torch.int64)
        labels = torch.randint(0, vocab, shape, generator=gen, dtype=torch.int64)
    else:
        inputs = torch.rand(shape, generator=gen, dtype=torch.float32).to(dtype)
        labels = torch.randint(0, built.num_classes, (batch_size,), generator=gen,
                               dtype=torch.int64)
    inputs, labels = inputs.to(device), labels.to(device)
    return itertools.repeat((inputs, labels))


class RealImages:
    """Batches from a prepared dataset; iterates epochs endlessly."""

    def __init__(self, loader: Any, device: torch.device, dtype: torch.dtype):
        self.loader = loader
        self.device = device
        self.dtype = dtype
        self.mean = torch.tensor(_MEAN, device=device, dtype=torch.float32).view(1, 3, 1, 1)
        self.std = torch.tensor(_STD, device=device, dtype=torch.float32).view(1, 3, 1, 1)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        non_blocking = self.device.type == "cuda"
        epoch = 0
        while True:
            sampler = getattr(self.loader, "sampler", None)
            if hasattr(sampler, "set_epoch"):
                sampler.set_epoch(epoch)
            produced = False
            for images, labels in self.loader:
                produced = True
                x = images.to(self.device, non_blocking=non_blocking).float()
                x = ((x - self.mean) / self.std).to(self.dtype)
                labels = labels.to(self.device, non_blocking=non_blocking)
                if non_blocking:
                    # The copy and the normalisation are the input's, as on a CPU, where
                    # they run here: waited for here, they count as data wait, not compute.
                    torch.cuda.current_stream(self.device).synchronize()
                yield x, labels
            if not produced:
                raise CellError("dataset yields no full batch: use a smaller --batch_size")
            epoch += 1


def real(built: BuiltModel, *, data_dir: str, backend: str, batch_size: int, shuffle: bool,
         workers: int, rank: int, world_size: int, device: torch.device, dtype: torch.dtype,
         worker_kind: str = "threads") -> tuple[RealImages, dict[str, Any]]:
    if built.input_kind != "image" or built.input_shape[0] != 3:
        raise CellError(f"real image data needs a 3-channel image model; this model takes "
                        f"{built.input_kind} of shape {built.input_shape}")
    from dlbench.pytorch.datasets import make_loader

    loader, manifest = make_loader(
        data_dir, backend, batch_size=batch_size, image_size=built.input_shape[-1],
        shuffle=shuffle, num_workers=workers, rank=rank, world_size=world_size,
        pin_memory=device.type == "cuda", workers=worker_kind)
    return RealImages(loader, device, dtype), manifest
