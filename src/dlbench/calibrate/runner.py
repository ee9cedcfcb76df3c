"""``python -m dlbench.calibrate``: a calibration cell (see dlbench.calibrate).

Each kernel is timed by the one harness (dlbench.harness.timed_loop: warmup excluded,
device synchronised after every iteration) and becomes one measurement: TFLOP/s for a
GEMM, GB/s for copy and triad. A kernel that runs out of memory or fails is recorded in
the result's extra and skipped; the cell fails only when no kernel ran.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Iterator
from typing import Any

from dlbench import cellrun, cli, cpu, harness, monitor, stages
from dlbench import result as R

log = logging.getLogger("dlbench.calibrate")

WARMUP = 3
ITERATIONS = 10


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dlbench.calibrate",
                                description="Measure the achievable GEMM TFLOP/s per precision "
                                            "and STREAM copy/triad GB/s of one device.")
    p.add_argument("--device", choices=("cpu", "gpu"), default="gpu")
    p.add_argument("--framework", default="pytorch", choices=("pytorch",))
    p.add_argument("--warmup", type=cli.at_least(0), default=WARMUP)
    p.add_argument("--iterations", type=cli.at_least(1), default=ITERATIONS)
    p.add_argument("--gemm_sizes", type=cli.whole_numbers(1),
                   help="comma-separated n of the n x n GEMMs (default: by device)")
    p.add_argument("--stream_elements", type=cli.at_least(1),
                   help="float32 elements per STREAM array (default: by device)")
    monitor.add_arguments(p)  # the launcher's and the profile jobs' --monitor_interval_ms
    p.add_argument("--output", type=cli.result_path, help="result JSON to write")
    p.add_argument("--study")
    p.add_argument("--cell_id")
    return p


def _emulated(device: str, precision: str) -> bool:
    if device != "cpu":
        return False
    info = cpu.this_cpu()
    return info is not None and not info.native(precision)


def kernels(args: argparse.Namespace, device: Any, precisions: list[str]) -> Iterator[Any]:
    """The kernels of the sweep, built one at a time (a GPU holds one set of operands)."""
    from dlbench.calibrate import kernels as K

    sizes = args.gemm_sizes or K.GEMM_SIZES[args.device]
    for precision in precisions:
        for n in sizes:
            yield lambda n=n, precision=precision: K.gemm(n, precision, device)
    elements = args.stream_elements or K.STREAM_ELEMENTS[args.device]
    yield lambda: K.copy(elements, device)
    yield lambda: K.triad(elements, device)


def measure(kernel: Any, args: argparse.Namespace, sync: Any) -> dict[str, Any]:
    from dlbench.pytorch.precision import tf32

    with tf32(kernel.precision == "tf32"):
        loop = harness.timed_loop(lambda: None, lambda _: kernel.run(), sync, args.warmup,
                                  args.iterations)
    return R.measurement(
        name=kernel.name, op_name=kernel.benchmark, pass_="calibration",
        times_s=loop.times_s, items_per_iteration=1.0, throughput_unit="iterations/s",
        flops_per_iteration=kernel.flops if kernel.benchmark == "gemm" else None,
        bytes_per_iteration=kernel.bytes,
        extra={"benchmark": kernel.benchmark, "precision": kernel.precision,
               "size": kernel.size, **kernel.facts})


def run(args: argparse.Namespace, res: dict[str, Any]) -> None:
    with stages.stage("startup"):  # the framework's import, inside the record
        import torch

        from dlbench.pytorch import torch_environment
        from dlbench.pytorch.runner import monitored_gpus

    if args.device == "gpu" and not torch.cuda.is_available():
        raise cellrun.CellError("device gpu: torch sees no CUDA device")
    device = torch.device("cuda" if args.device == "gpu" else "cpu")
    res["environment"] = torch_environment.collect(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    from dlbench.calibrate.kernels import GEMM_PRECISIONS, float8_supported

    # A precision this CPU emulates runs tens of times slower than its native ones: a
    # sweep of it would take minutes, and one small size is no ceiling. Said, not measured.
    precisions = [p for p in GEMM_PRECISIONS[args.device] if not _emulated(args.device, p)]
    emulated = [p for p in GEMM_PRECISIONS[args.device] if p not in precisions]
    if emulated:
        res["extra"]["emulated_precisions_not_measured"] = emulated
    if "float8" in precisions and not float8_supported(device):
        precisions.remove("float8")  # no FP8 tensor cores: no FP8 ceiling to measure
        res["extra"]["unsupported_precisions_not_measured"] = ["float8"]
    skipped = []
    # The resource monitor samples the whole sweep: every kernel's warmup and measurement.
    mon = monitor.ResourceMonitor(args.monitor_interval_ms, gpus=monitored_gpus(device, 1),
                                  window="the whole sweep (each kernel's operands, warm-up "
                                         "and measured iterations)")
    with mon:
        for build in kernels(args, device, precisions):
            kernel = None
            try:
                with stages.stage("build"):  # the kernel's operands
                    kernel = build()
                res["measurements"].append(measure(kernel, args, sync))
                log.info("%s: %s", kernel.name, _figure(res["measurements"][-1]))
            except (RuntimeError, MemoryError) as exc:  # one kernel: the others still run
                what = kernel.name if kernel else "a kernel"
                skipped.append({"kernel": what,
                                "status": "oom" if cellrun.is_oom(exc) else "failed",
                                "error": cellrun.one_line(exc)})
                log.warning("%s skipped: %s", what, cellrun.one_line(exc))
            finally:
                del kernel
                if device.type == "cuda":
                    torch.cuda.empty_cache()
    monitor.attach(res, args.output, mon, items=0.0)  # its energy is no measured one's
    if skipped:
        res["extra"]["skipped_kernels"] = skipped
    if not res["measurements"]:
        raise cellrun.CellError(f"no calibration kernel ran ({skipped[0]['error']})")


def _figure(m: dict[str, Any]) -> str:
    return (f"{m['tflops']:.3f} TFLOP/s" if m.get("tflops") is not None
            else f"{m['gbps']:.1f} GB/s")


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s", stream=sys.stderr)
    args = parser().parse_args(argv)
    cell = {"framework": args.framework, "device": args.device}
    if args.gemm_sizes:  # sizes of the study's own (dlbench.axes), else the device's
        cell["gemm_sizes"] = ",".join(str(n) for n in args.gemm_sizes)
    if args.stream_elements:
        cell["stream_elements"] = args.stream_elements
    res = R.new_result(kind="calibration", cell=cell, study=args.study, cell_id=args.cell_id)
    with cellrun.recorded(res, args.output):
        run(args, res)
    return cellrun.exit_code(res)
