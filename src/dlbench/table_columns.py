"""What each column of the results table (``results/benchmarks.parquet``) holds.

``COLUMNS`` gives every column that is not a cell axis its unit and a one-line
description; a cell axis's description is its help text in the axis table
(``dlbench.axes``), or ``AXES`` where that has none or speaks of the command line. The
aggregate attaches both to each Parquet field (``field_metadata``), and
``python -m dlbench.table_columns > docs/columns.md`` writes the dictionary as Markdown,
in the table's column order, with each column's Arrow type.
"""

from __future__ import annotations

import functools
import sys

from dlbench import axes

# The regenerating command, said in docs/columns.md and by the test that holds it equal.
REGENERATE = "python -m dlbench.table_columns > docs/columns.md"

# unit, description. "" is no unit (text, flags, counts whose description names the thing).
COLUMNS: dict[str, tuple[str, str]] = {
    # Identity and outcome
    "system": ("", "the system label: the results/<system>/ folder the result file lies in, "
                   "else the label the result was made under"),
    "study": ("", "the study the cell belongs to"),
    "cell_id": ("", "the cell's id: its readable axes and a hash of every parameter"),
    "repeat": ("", "which run of the cell: 0 for the first, k for repeat k (<cell_id>_r<k>.json)"),
    "kind": ("", "model, op, loader (a model cell timing its input pipeline alone), "
                 "calibration, llm_inference or comms"),
    "status": ("", "ok, oom (out of memory, the OOM killer included), failed (any other "
                   "error, an invalid result file too) or skipped"),
    "error": ("", "one line saying why the row is not ok; null when ok"),
    "model_opts": ("", "JSON: the model options the study gave (null for none; every option "
                       "the model was built with is in extra.model_opts)"),
    # The measurement
    "name": ("", "what was measured: the model; an operator input's id (config|build|input); "
                 "a collective's '<collective>|<message bytes>'; a calibration kernel; null "
                 "in a row without measurements"),
    "op_name": ("", "the operator (op), collective (comms) or calibration benchmark (gemm, "
                    "copy, triad); null for model, loader and llm_inference rows"),
    "pass": ("", "training, inference, forward, backward, loader, calibration, prefill, "
                 "decode, collective, latency, unidirectional or bidirectional"),
    "iterations": ("", "measured iterations (the length of times_s): a language model's "
                       "prefill counts generations, its decode the decode steps"),
    "items_per_iteration": ("items", "items one iteration processes, in throughput_unit's "
                                     "items: a model's batch_size x devices (x items per "
                                     "sample), a prefill's batch x prompt tokens, a decode "
                                     "step's batch; 1 for op, calibration and comms rows"),
    "time_mean_s": ("s", "mean of the measured iterations' times (times_s)"),
    "time_median_s": ("s", "median iteration time (linear interpolation); throughput, "
                           "tflops and gbps are at it"),
    "time_std_s": ("s", "sample standard deviation (ddof=1) of the iteration times; 0 with "
                        "one iteration"),
    "time_min_s": ("s", "fastest iteration"),
    "time_max_s": ("s", "slowest iteration"),
    "time_p5_s": ("s", "5th percentile of the iteration times (linear interpolation)"),
    "time_p95_s": ("s", "95th percentile of the iteration times (linear interpolation)"),
    "time_p99_s": ("s", "99th percentile of the iteration times (linear interpolation)"),
    "throughput": ("throughput_unit", "items_per_iteration over time_median_s: this run's "
                                      "rate at its median iteration"),
    "throughput_unit": ("", "the unit of throughput and cell_throughput: samples/s, "
                            "images/s (MXNet), tokens/s, shots/s; iterations/s for op and "
                            "calibration rows, operations/s for comms rows (one collective "
                            "or point-to-point operation of a window)"),
    # Across the cell's repeats (dlbench.run_to_run): the same on each ok repeat's row
    "repeats": ("", "how many ok runs of the cell measured this measurement; null in rows "
                    "that are not ok"),
    "cell_time_median_s": ("s", "the mean (not a median) of the ok runs' time_median_s (with one run, its "
                                "median): the cell's time, which the report and dlbench "
                                "compare use"),
    "cell_throughput": ("throughput_unit", "items_per_iteration over cell_time_median_s"),
    "cell_time_ci_low_s": ("s", "lower end of the 95% bootstrap confidence interval of "
                                "cell_time_median_s (ci_method says over what); null with "
                                "ci_method none"),
    "cell_time_ci_high_s": ("s", "upper end of that 95% confidence interval"),
    "ci_method": ("", "repeats (bootstrap over the runs' medians), iterations (one run: "
                      "over its iterations, taken as independent) or none (one run of "
                      "fewer than 6 iterations)"),
    "run_to_run_cv": ("share 0-1", "sample std (ddof=1) of the runs' medians over their "
                                   "mean; null with one run"),
    "within_run_cv": ("share 0-1", "this run's time_std_s over time_mean_s"),
    "unstable": ("", "run_to_run_cv above unstable_cv (default 0.05, kept in the Parquet "
                     "metadata as dlbench.unstable_cv); null with one run"),
    # Drift within the run (dlbench.drift)
    "time_drift": ("share of median", "Sen's slope of the iteration times x (iterations - "
                                      "1) over their median: +0.08 rose by 8% of the median "
                                      "over the run; null below 10 iterations"),
    "time_drift_p": ("p-value", "Mann-Kendall's two-sided p-value of that trend (at most "
                                "160 iterations spread over the run tested)"),
    "drifting": ("", "time_drift_p below 0.001 and |time_drift| at least 0.05"),
    "warmup_settled": ("", "whether a warm-up until steady (warmup_until_steady) settled "
                           "before its limits; null for a fixed warm-up"),
    "warmup_seconds": ("s", "how long that warm-up until steady ran; null for a fixed "
                            "warm-up"),
    # Work and rates
    "precision_native": ("", "whether the cell's precision is native on its device (false: "
                             "emulated); null where not known or not recorded (op, "
                             "calibration, comms, llm_inference)"),
    "parameters": ("", "the model's parameter count; null for other kinds"),
    "phi": ("", "ParaDnn FC models only: Φ, the weights with biases excluded"),
    "phi_tflops": ("TFLOP/s", "ParaDnn FC models only: ParaDnn's 6·Φ·items (2·Φ for "
                              "inference) over the mean iteration time (not the median)"),
    "flops_per_iteration": ("FLOP", "FLOPs one iteration does, all devices of the cell "
                                    "together (counted by FlopCounterMode; language models: "
                                    "PaLM's formula); null where not counted (flops_note)"),
    "tflops": ("TFLOP/s", "flops_per_iteration over time_median_s, all the cell's devices "
                          "together"),
    "flops_note": ("", "why flops_per_iteration is null (no formula for a kernel, no FLOPs "
                       "counted, MXNet)"),
    "bytes_per_iteration": ("bytes", "bytes one iteration moves: an operator's inputs and "
                                     "outputs, a ParaDnn FC cell's operands, a decode step's "
                                     "weights and KV cache, a STREAM kernel's arrays, a "
                                     "collective's message(s); null where not defined"),
    "gbps": ("GB/s", "gigabytes (1e9 bytes) per second: bytes_per_iteration over "
                     "time_median_s (a collective's algorithm bandwidth); null for latency "
                     "tests"),
    "bus_gbps": ("GB/s", "collectives: gbps x nccl-tests' bus factor for the collective and "
                         "ranks; null for latency tests and other kinds"),
    "link": ("", "collectives: the link that limits them (nvlink, pcie or network); null "
                 "where none was read (one process, CPU processes on one node)"),
    "link_gbps": ("GB/s", "collectives: that link's bandwidth in one direction (a network's "
                          "shared among the communicators crossing the node)"),
    "pct_of_link": ("%", "collectives: bus_gbps as a percentage of link_gbps (of twice it "
                         "for a bidirectional test); can pass 100 with in-switch reduction"),
    # How close to the hardware (dlbench.efficiency)
    "efficiency_precision": ("", "the precision the efficiency columns are of: the cell's, "
                                 "an operator input's one floating dtype, a calibration "
                                 "kernel's; null without tflops or gbps"),
    "peak_tflops": ("TFLOP/s", "the vendor's dense peak for gpu_model at that precision "
                               "(dlbench/peaks.yaml); null on CPUs and unknown devices"),
    "pct_of_peak": ("%", "tflops per device (over num_gpus x num_nodes on a GPU) as a "
                         "percentage of peak_tflops"),
    "measured_tflops": ("TFLOP/s", "the best calibration GEMM of that precision on the same "
                                   "system, device and device model"),
    "pct_of_measured": ("%", "tflops per device as a percentage of measured_tflops"),
    "mfu": ("share 0-1", "model rows: tflops per device over peak_tflops, a fraction (the "
                         "same ratio as pct_of_peak, not a percentage)"),
    "peak_gbps": ("GB/s", "the vendor's memory bandwidth for gpu_model; null on CPUs, for "
                          "collectives and unknown devices"),
    "pct_of_peak_gbps": ("%", "gbps per device as a percentage of peak_gbps"),
    "measured_gbps": ("GB/s", "the best calibration STREAM copy or triad on the same "
                              "system, device and device model; null for collectives"),
    "pct_of_measured_gbps": ("%", "gbps per device as a percentage of measured_gbps (can "
                                  "pass 100 for inputs that fit in cache)"),
    # Input pipeline and execution mode
    "data_wait_s": ("s", "model rows: time waiting for input over all the measured "
                         "iterations (the rank that waited longest); MXNet: null with "
                         "synthetic data"),
    "compute_s": ("s", "model rows: the rest of the measured iterations' time (MXNet with "
                       "synthetic data: all of it)"),
    "compile_time_s": ("s", "the first compiled call's wall time; null when eager and in "
                            "llm_inference rows"),
    "graph_breaks": ("", "dynamo's graph breaks (model: the process's total after the "
                         "compile warm-up; op: this input's compile)"),
    "recompilations": ("", "frames dynamo compiled after the first compiled call (model: "
                           "during the settling warm-up only; op: up to the end of the "
                           "measured calls)"),
    "recompiled_in_measurement": ("", "whether dynamo compiled during the measured "
                                      "iterations (their times include it); null when "
                                      "eager"),
    "inductor_cache_warm": ("", "whether inductor's cache held code before compiling; null "
                                "when eager or unknown"),
    "accuracy_cosine": ("", "cosine similarity of the output to eager float32's on one "
                            "fixed input; null when unchecked (eager float32/float64) or "
                            "not finite"),
    "accuracy_max_rel_error": ("", "largest output difference over the reference's largest "
                                   "magnitude; null when unchecked"),
    "inaccurate": ("", "outside the precision's tolerance; null when unchecked"),
    "last_loss": ("", "training: the last measured step's loss; null when not finite or "
                      "not training"),
    "loss_finite": ("", "training: whether that loss was finite"),
    # Resources and energy (the resource monitor's summary, dlbench.monitor)
    "peak_host_rss_bytes": ("bytes", "peak RSS of the runner's process and its descendants, "
                                     "summed"),
    "peak_device_memory_bytes": ("bytes", "NVML's peak memory used, of the cell's GPU that "
                                          "used most (allocator reserve, CUDA context and "
                                          "other processes included)"),
    "peak_host_pss_bytes": ("bytes", "peak PSS of those processes, summed (shared pages "
                                     "counted once); null where unreadable"),
    "max_memory_allocated_bytes": ("bytes", "PyTorch GPU cells: "
                                            "torch.cuda.max_memory_allocated over the warm-up "
                                            "and measured steps"),
    "power_mean_w": ("W", "mean power of what energy_j counts (GPUs plus host RAPL)"),
    "power_max_w": ("W", "highest total draw over one sampling interval"),
    "energy_j": ("J", "energy of the monitored window (energy_note says when it is more "
                      "than the measured iterations); null when not wholly counted"),
    "samples_per_joule": ("items/J", "items processed over energy_j (language models: "
                                     "output tokens; several nodes: node 0's share); null "
                                     "for op, calibration and comms rows"),
    "energy_note": ("", "why energy is partial or missing, and 'over ...' when the window "
                        "is more than the measured iterations (op, comms, calibration); "
                        "null when all is counted"),
    "energy_sources": ("", "what energy_j counts, sorted and joined by '+' "
                           "(gpu:nvml_total_energy+host:rapl); null where nothing was"),
    "gpu_power_limit_w": ("W", "the lowest enforced power limit among the cell's GPUs"),
    "gpu_clocks_held_back": ("share 0-1", "share of samples the most held-back GPU ran "
                                          "below its clock (power cap, thermal, hardware "
                                          "slowdown, power brake)"),
    "gpu_clock_reasons": ("", "that GPU's held-back reasons in words ('power cap 62%')"),
    "cpu_steal_fraction": ("share 0-1", "share of the host's CPU time the hypervisor took "
                                        "(steal) over the monitored window"),
    "cpu_throttled_s": ("s", "time the cell's cgroup's CPU quota stopped it over the "
                             "monitored window"),
    # Wall time (dlbench.stages)
    "wall_time_s": ("s", "the cell's wall time from its record's start, process start-up "
                         "excluded (a launcher's row: its time to the row, a lower bound)"),
    "wall_startup_s": ("s", "the process starting before its record (interpreter, imports) "
                            "plus a framework imported inside it; not in wall_time_s"),
    "wall_environment_s": ("s", "collecting the environment facts"),
    "wall_build_s": ("s", "building the model, optimizer and data (op rows: the operators "
                          "and their inputs)"),
    "wall_flop_count_s": ("s", "counting the FLOPs"),
    "wall_compile_s": ("s", "the first compiled step and the settling warm-up"),
    "wall_warmup_s": ("s", "the warm-up iterations"),
    "wall_measure_s": ("s", "the measured iterations, the monitor's and profiler's start and "
                            "stop included"),
    "wall_accuracy_s": ("s", "the accuracy check against eager float32"),
    "wall_other_s": ("s", "what no stage covers; the stages sum to wall_time_s + "
                          "wall_startup_s"),
    "started_at": ("", "when the cell's record started (a timestamp in UTC, to the "
                       "millisecond)"),
    "finished_at": ("", "when it finished (a timestamp in UTC); null if it never did"),
    # Environment (dlbench.environment, and the framework's runner)
    "hostname": ("", "the host the runner ran on (socket.gethostname)"),
    "cpu_model": ("", "the CPU's name from cpuinfo"),
    "cpu_capability": ("", "the CPU's SIMD level (PyTorch cells: "
                           "torch.backends.cpu.get_cpu_capability, AVX2, AVX512, ...)"),
    "cpu_features": ("", "the ISA features that decide reduced-precision speed, "
                         "comma-separated (avx512_bf16, amx_tile, ...)"),
    "cpu_count": ("", "logical CPUs of the host (os.cpu_count)"),
    "cpu_cores": ("", "physical CPU cores"),
    "cpu_sockets": ("", "CPU sockets"),
    "cpus_usable": ("", "CPUs the process's affinity mask allowed (a Slurm cpuset, taskset)"),
    "gpu_model": ("", "GPU cells: the GPU the framework ran on (a MIG instance says so), "
                      "else the host's GPU models joined by ', '; peaks are looked up by it"),
    "gpu_driver": ("", "the NVIDIA driver version (NVML); null without one"),
    "cuda_version": ("", "the CUDA PyTorch was built with (torch.version.cuda), not the "
                         "driver's; null in MXNet cells and CPU-only builds"),
    "cudnn_version": ("", "cuDNN as torch reports it, an integer in text ('90100' is "
                          "9.1.0); null in MXNet cells and without cuDNN"),
    "nccl_version": ("", "the NCCL torch runs, dotted ('2.21.5'); null without NCCL and in "
                         "MXNet cells"),
    "framework_version": ("", "torch.__version__ or mxnet.__version__"),
    "python_version": ("", "the runner's Python (platform.python_version)"),
    "dlbench_version": ("", "dlbench.__version__ of the runner"),
    "dlbench_git_revision": ("", "the dlbench checkout's commit, '-dirty' with uncommitted "
                                 "changes to tracked files (else DLBENCH_GIT_REVISION); null "
                                 "when unknown"),
    "container": ("", "the container image as the workflow names it (path or URI), else "
                      "as Apptainer reports it; null outside one"),
    "container_digest": ("", "the image's digest as the launcher was given it "
                             "(DLBENCH_CONTAINER_DIGEST); null where none"),
    "slurm_job_id": ("", "the Slurm job the cell ran in; null outside one"),
    "slurm_partition": ("", "that job's partition; null outside one"),
    # Raw
    "times_s": ("s", "every measured iteration's time, in order (a collective's: one "
                     "operation's, the iteration's over the operations it issued; the "
                     "slowest rank's); Parquet only, not in the CSV"),
    "environment": ("", "JSON: the whole environment record (library flags, GPU list, "
                        "nccl_env, ...)"),
    "extra": ("", "JSON: the result's extra merged with the measurement's (monitor, compile, "
                  "link, ...)"),
    "source": ("", "the result file the row comes from, as the aggregate was given it"),
}

# Axis columns whose axis has no help text, or a command line's one (blocking's 1 and 0).
AXES: dict[str, str] = {
    "phase": "training or inference (a loader-only cell keeps it, running neither)",
    "precision": "the arithmetic precision: float32, tf32, float16, bfloat16, float64 "
                 "(MXNet: float32, float16)",
    "device": "gpu or cpu",
    "data": "the dataset read, or synthetic (batches made in memory)",
    "num_warmup_batches": "warm-up iterations before the measured ones (LLM inference: "
                          "warm-up generations)",
    "cudnn_benchmark": "torch.backends.cudnn.benchmark (MXNet: cuDNN autotune); recorded "
                       "but ignored on a CPU",
    "cudnn_fastest": "torch.backends.cudnn.benchmark_limit = 0 (try every convolution "
                     "algorithm); recorded but ignored on a CPU",
    "data_shuffle": "the loader shuffles the dataset; recorded but ignored with synthetic "
                    "data",
    "num_loader_threads": "input pipeline workers (PyTorch: DataLoader workers; MXNet: "
                          "--preprocess_threads); recorded but ignored with synthetic data",
    "kv_store": "MXNet's kvstore; recorded but ignored where none is made (one device, "
                "inference, loader-only)",
    "backward": "the backward pass is timed too: each input gets forward and backward rows",
    "exec_mode": "PARAM's execution mode: discrete (each call timed), continuous (one time "
                 "per loop, the mean per call), continuous_events; off a GPU each call is "
                 "timed whatever the mode",
    "cuda_l2_cache": "on, or off: the GPU's L2 cache is flushed before each call (discrete "
                     "mode on a GPU only)",
    "collective": "the collective timed (all_reduce, all_gather, ..., pt2pt, incast, "
                  "multicast)",
    "blocking": "true: each collective waited for on its own; false: window collectives "
                "issued back to back, then waited for once",
    "validate": "each size's received data was checked (outside the timed iterations)",
}

# Axis columns' units, where a value has one.
AXIS_UNITS: dict[str, str] = {
    "batch_size": "samples", "num_gpus": "devices", "num_nodes": "nodes",
    "num_batches": "iterations", "num_warmup_batches": "iterations",
    "stream_elements": "elements", "begin_size": "bytes", "end_size": "bytes",
    "step_bytes": "bytes", "message_sizes": "bytes", "in_split": "elements",
    "out_split": "elements", "window": "operations", "mm_dim": "elements",
    "emb_dim": "elements", "prompt_length": "tokens", "output_length": "tokens",
}

# Headings of the Markdown dictionary, each before the column it names (table order).
SECTIONS: dict[str, str] = {
    "system": "Identity and outcome",
    "framework": "Cell axes",
    "name": "Measurement",
    "repeats": "Across the cell's repeats",
    "time_drift": "Drift and warm-up",
    "precision_native": "Work and rates",
    "efficiency_precision": "How close to the hardware",
    "data_wait_s": "Input pipeline and execution mode",
    "peak_host_rss_bytes": "Resources and energy",
    "wall_time_s": "Wall time",
    "hostname": "Environment",
    "times_s": "Raw records",
}


def axis_columns() -> set[str]:
    """The axis table's columns of the results table."""
    return {name for name, _ in axes.columns()}


@functools.cache
def _result_kinds() -> dict[str, tuple[str, ...]]:
    """A cell kind's name -> the ``kind`` values its rows hold (a model cell timing its
    input alone writes "loader"): the table says these, not the axis table's names."""
    from dlbench import kinds

    out = {}
    for name in kinds.names():
        result_kind = kinds.get(name).result_kind
        out[name] = (result_kind, "loader") if result_kind == "model" else (result_kind,)
    return out


def _axis_scope(axis: axes.Axis) -> str:
    """Which rows hold the axis: its kinds, as the kind column names them, and its
    frameworks where it is not every framework's."""
    rows = [k for name in axis.kinds for k in _result_kinds().get(name, (name,))]
    scope = f"{', '.join(rows)} rows"
    if axis.frameworks is not None:
        scope += f" of {', '.join(axis.frameworks)}"
    return scope


def _axis_description(name: str) -> str:
    axis = axes.get(name)
    text = AXES.get(name) or axis.help
    if not text:
        raise KeyError(f"column {name!r}: its axis has no help text and AXES no entry")
    # Null elsewhere, and where the cell does not use the axis (synthetic data_backend).
    return f"{text} [{_axis_scope(axis)}]"


def describe(name: str) -> tuple[str, str]:
    """(unit, description) of a results-table column; KeyError names one without."""
    if name in axis_columns():
        return AXIS_UNITS.get(name, ""), _axis_description(name)
    if name not in COLUMNS:
        raise KeyError(f"column {name!r} has no entry in dlbench.table_columns.COLUMNS")
    return COLUMNS[name]


def field_metadata(name: str) -> dict[bytes, bytes]:
    """The column's Parquet field metadata, {b"unit", b"description"}; empty for a column
    without a description, so that the table is still written (the test names it)."""
    try:
        unit, description = describe(name)
    except KeyError:
        return {}
    return {b"unit": unit.encode(), b"description": description.encode()}


def type_name(dtype: object) -> str:
    """An Arrow type as the dictionary writes it: list<double>, not list<item: double>."""
    import pyarrow as pa

    if isinstance(dtype, pa.ListType):
        return f"list<{type_name(dtype.value_type)}>"
    return str(dtype)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


INTRO = (
    "# Columns of the results table\n\n"
    "`results/benchmarks.parquet` (and `results/benchmarks.csv`, without `times_s`) has one "
    "row per measurement, keyed by `system`, `study`, `cell_id`, `repeat`, `op_name`, `name` "
    "and `pass`; a cell without measurements (failed, oom, skipped) is one row with its "
    "status and error and empty metrics. This page is generated from the code "
    f"(`{REGENERATE}`), and the Parquet's fields carry the same unit and description in "
    "their metadata (`unit`, `description`).\n\n"
    "A cell axis's column is null in rows of other kinds or frameworks (named in brackets) "
    "and where the cell does not use the axis.\n"
)


def markdown() -> str:
    """The dictionary: each column of the results table in its order, with its Arrow type,
    unit and description, under SECTIONS' headings."""
    from dlbench.aggregate import SCHEMA  # here: the aggregate imports this module

    lines = [INTRO]
    for field in SCHEMA:
        if field.name in SECTIONS:
            lines += ["", f"## {SECTIONS[field.name]}", "",
                      "| column | type | unit | description |", "|---|---|---|---|"]
        unit, description = describe(field.name)
        lines.append(f"| `{field.name}` | {type_name(field.type)} | {_cell(unit)} | "
                     f"{_cell(description)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m dlbench.table_columns",
        description="Print the results table's column dictionary as Markdown "
                    f"({REGENERATE}).")
    parser.parse_args(argv)
    sys.stdout.write(markdown())
    return 0


if __name__ == "__main__":
    sys.exit(main())
