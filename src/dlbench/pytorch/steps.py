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


class TrainingStep:
    """One training step (a ``Step``); ``last_loss`` is the last step's loss, a reference
    only (no copy, no synchronisation), read after the measured steps. A class rather than
    a closure that sets an attribute on itself: such a function refers to itself, a cycle
    only the garbage collector frees, and the FLOP count's step, its optimizer's state
    with it (Adam's: twice the weights), stayed in memory through the timed loop."""

    def __init__(self, model: torch.nn.Module, built: BuiltModel, mode: PrecisionMode,
                 device_type: str) -> None:
        model.train()
        self.model, self.mode, self.device_type = model, mode, device_type
        self.optimizer = make_optimizer(built, model.parameters())
        self.scaler = mode.grad_scaler(device_type)
        self.criterion = torch.nn.CrossEntropyLoss()
        self.misfit = built.loss == "mse"  # regression against targets of the output's shape
        self.last_loss: torch.Tensor | None = None

    def __call__(self, inputs: torch.Tensor, labels: torch.Tensor) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        with self.mode.autocast(self.device_type):
            if self.misfit:
                loss = torch.nn.functional.mse_loss(self.model(inputs), labels)
            else:
                out = logits(self.model(inputs))
                loss = self.criterion(out.reshape(-1, out.shape[-1]), labels.reshape(-1))
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            self.optimizer.step()
        self.last_loss = loss


def training_step(model: torch.nn.Module, built: BuiltModel, mode: PrecisionMode,
                  device_type: str) -> Step:
    return TrainingStep(model, built, mode, device_type)


def inference_step(model: torch.nn.Module, mode: PrecisionMode, device_type: str) -> Step:
    model.eval()

    def step(inputs: torch.Tensor, labels: torch.Tensor) -> None:
        with torch.inference_mode(), mode.autocast(device_type):
            model(inputs)

    return step
