"""The NumPy framework's runner: it builds the workload of a cell; dlbench.harness does
the flags, the timing, the monitor, failures and the result."""

from __future__ import annotations

import argparse
import platform

import numpy as np

from dlbench import environment, harness, models


def build(args: argparse.Namespace) -> harness.Workload:
    if args.device != "cpu":
        raise harness.cellrun.CellError("--device: the numpy framework runs on the cpu only")
    spec = models.get(args.model)
    opts = spec.opts(args.model_opts)
    dtype = np.dtype(args.dtype)
    rng = np.random.default_rng(0)
    (features,), hidden, classes = spec.input_shape, opts["hidden"], spec.num_classes
    w1 = rng.standard_normal((features, hidden)).astype(dtype) * 0.1
    w2 = rng.standard_normal((hidden, classes)).astype(dtype) * 0.1
    x = rng.standard_normal((args.batch_size, features)).astype(dtype)
    y = np.eye(classes, dtype=dtype)[rng.integers(0, classes, args.batch_size)]

    def forward(batch):
        h = np.maximum(batch @ w1, 0)
        return h, h @ w2

    def train_step(batch):
        nonlocal w1, w2
        h, out = forward(batch)
        grad_out = (out - y) / len(batch)
        grad_h = (grad_out @ w2.T) * (h > 0)
        w2 = w2 - 0.01 * h.T @ grad_out
        w1 = w1 - 0.01 * batch.T @ grad_h

    step = (lambda batch: forward(batch)) if args.forward_only else train_step
    flops = 2 * args.batch_size * (features * hidden + hidden * classes)
    return harness.Workload(
        fetch=lambda: x, step=step, sync=lambda: None,  # NumPy is synchronous
        items_per_iteration=args.batch_size,
        parameters=w1.size + w2.size,
        flops_per_iteration=flops if args.forward_only else 3 * flops,
        facts={"hidden": hidden})


def env(args: argparse.Namespace) -> dict:
    return {**environment.collect(), "framework": "numpy", "framework_version": np.__version__,
            "library_flags": {"blas": platform.machine()}}


def main(argv: list[str] | None = None) -> int:
    return harness.main("numpy", build, env, argv, prog="python -m dlbench_numpy_example")
