"""What the GPU acceptance check runs and the thresholds it holds the figures to."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

REPO = Path(__file__).resolve().parents[2]
# The script the check runs as (its --part runs measure in processes of their own).
SCRIPT = REPO / "benchmarks" / "gpu_acceptance.py"
SRC = REPO / "src"
PRECISIONS = ("float32", "tf32", "float16", "bfloat16")
BATCH = 256
NUM_BATCHES, WARMUP = 15, 5
COMPILE_MODES = ("inductor", "cudagraphs")  # with --autotune also inductor-max-autotune
MATMUL_N = 8192
# Thresholds of the issue that asked for this check.
EVENTS_AGREEMENT = 0.02
BARE_RATIO = 0.99
TIMER_RATIO = 0.98
EVENTS_VS_DISCRETE = 0.10
LLM_BARE_RATIO = 0.98
# The ratios' upper bounds: ours that much faster than the reference means time left out
# of ours (a missing synchronisation makes it many times faster), not a better harness.
RATIO_CEILING = 1.05
PEAK_OVER_MEAN = 0.98  # a GPU's power peak against its mean (interval edges aside)
# The time budget: the commands run in order until it is spent (a lent GPU comes with
# minutes, not hours); the aggregate and the report come after it.
BUDGET_S = 420
MIN_SLOT = 20
REPORT_TIMEOUT = 120
STUDY = "gpu-check"  # the study the results belong to (the report's name for them)
NOT_RUN = "not run: "  # every reason a command did not run starts so
BUDGET_SPENT = NOT_RUN + "the time budget (--budget) was spent"
NOT_SELECTED = NOT_RUN + "not among --only"
NOTHING_SKIPPED: Mapping[str, str] = MappingProxyType({})
ARCHIVE_FILE_LIMIT = 4 << 20
# Language models (dlbench.models.llm): GPT-2 XL fits any lent GPU in training; Llama-3-8B
# with float32 master weights and Adam needs about 128 GB (an oom row on an H100 is the
# right outcome, on an H200 it may fit); its inference in bfloat16 takes 16 GB.
LLM_TRAIN = {"gpt2_xl": (4, 1024), "llama3_8b": (1, 2048)}  # model -> (batch, sequence)
LLM_SERVE_BATCHES = (1, 32)
LLM_SERVE_COMPILE = "cudagraphs"  # the compiled serving cell's mode (batch 1)
COMMS_END = 256 << 20  # bytes: the largest all_reduce of the NCCL check
# The GEMM beside the collectives, as PARAM's --mm-dim m n p: A[4096, 8192] times
# B[8192, 2048], as many FLOPs as a 4096-cube.
COMMS_GEMM = (4096, 8192, 2048)
LLM_PROMPT, LLM_OUTPUT = 512, 64
