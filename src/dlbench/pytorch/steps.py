"""One training or inference iteration, as a closure over model, optimizer and precision."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from dlbench.pytorch.precision import PrecisionMode
from dlbench.pytorch.zoo import BuiltModel

Step = Callable[[torch.Tensor, torch.Tensor], None]


def make_optimizer(built: BuiltModel, params: Any) -> torch.optim.Optimizer:
    kwargs = dict(built.optimizer_kwargs)
    if built.optimizer == "rmsprop":
        return torch.optim.RMSprop(params, **kwargs)
    if built.optimizer == "adam":
        return torch.optim.Adam(params, **kwargs)
    if built.optimizer == "sgd":
        kwargs.setdefault("lr", 0.01)
        kwargs.setdefault("momentum", 0.9)
        return torch.optim.SGD(params, **kwargs)
    raise ValueError(f"unknown optimizer {built.optimizer!r}")


def logits(output: Any) -> torch.Tensor:
    # Some models return a named tuple (e.g. with auxiliary heads); the first is the logits.
    if isinstance(output, torch.Tensor):
        return output
    if hasattr(output, "logits"):
        return output.logits
    return output[0]


def training_step(model: torch.nn.Module, built: BuiltModel, mode: PrecisionMode,
                  device_type: str) -> Step:
    model.train()
    optimizer = make_optimizer(built, model.parameters())
    scaler = mode.grad_scaler(device_type)
    criterion = torch.nn.CrossEntropyLoss()
    misfit = built.loss == "mse"  # regression against targets of the output's shape

    def step(inputs: torch.Tensor, labels: torch.Tensor) -> None:
        optimizer.zero_grad(set_to_none=True)
        with mode.autocast(device_type):
            if misfit:
                loss = torch.nn.functional.mse_loss(model(inputs), labels)
            else:
                out = logits(model(inputs))
                loss = criterion(out.reshape(-1, out.shape[-1]), labels.reshape(-1))
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        # A reference only (no copy, no synchronisation): read after the measured steps.
        step.last_loss = loss

    step.last_loss = None
    return step


def inference_step(model: torch.nn.Module, mode: PrecisionMode, device_type: str) -> Step:
    model.eval()

    def step(inputs: torch.Tensor, labels: torch.Tensor) -> None:
        with torch.inference_mode(), mode.autocast(device_type):
            model(inputs)

    return step
