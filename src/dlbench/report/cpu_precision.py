"""In words: which reduced precisions a CPU emulates, and what that costs.

On a CPU without bfloat16 (or float16) instructions, those types run through slow
conversion kernels; a reader of the report should learn that from a sentence, not infer
it from an odd bar. The factor comes from the study's own cells: each CPU cell in bfloat16
or float16 against its float32 twin (same model, phase, batch, framework and data).
"""

from __future__ import annotations

from html import escape

import pandas as pd

from dlbench.report.model_charts import speedup_frame

REDUCED = ("bfloat16", "float16")
# Why a precision is emulated, by the instructions that would make it native.
MISSING_ISA = {"bfloat16": "AVX-512 BF16 or AMX-BF16 (x86), BF16 (arm64)",
               "float16": "AVX-512 FP16 or AMX-FP16 (x86), half-precision SIMD (arm64)"}


def _native_word(values: pd.Series) -> str | None:
    known = {bool(v) for v in values if v is not None and not pd.isna(v)}
    if known == {True}:
        return "native"
    if known == {False}:
        return "emulated"
    return None  # not recorded (older results) or mixed


def emulation_facts(models: pd.DataFrame) -> list[dict]:
    """One record per CPU and reduced precision: native or emulated, and the median time
    of its cells relative to their float32 twins (>1: slower)."""
    if models.empty:
        return []
    pairs = speedup_frame(models)
    pairs = pairs[(pairs["device"] == "cpu") & pairs["precision"].isin(REDUCED)]
    facts = []
    for (cpu, precision), group in pairs.groupby(["cpu_model", "precision"], sort=True):
        slowdown = 1.0 / group["speedup"]
        capability = next((c for c in group["cpu_capability"] if isinstance(c, str)), None)
        facts.append({
            "cpu_model": cpu, "cpu_capability": capability, "precision": precision,
            "native": _native_word(group["precision_native"]),
            "slowdown_median": float(slowdown.median()), "slowdown_min": float(slowdown.min()),
            "slowdown_max": float(slowdown.max()), "pairs": len(group)})
    return facts


def _times(value: float) -> str:
    return f"{value:.1f}×" if value < 10 else f"{value:.0f}×"


def sentence(fact: dict) -> str:
    cpu = fact["cpu_model"] + (f" ({fact['cpu_capability']})" if fact["cpu_capability"] else "")
    median, precision = fact["slowdown_median"], fact["precision"]
    low, high = fact["slowdown_min"], fact["slowdown_max"]
    if median >= 1:
        cost = f"its {precision} steps took {_times(median)} as long as float32"
    else:
        cost = f"its {precision} steps ran {_times(1 / median)} faster than float32"
        # The range in the headline's terms: speed-ups, the least first.
        low, high = 1 / high, 1 / low
    spread = (f"median of {fact['pairs']} cell pairs, {_times(low)}–{_times(high)}"
              if fact["pairs"] > 1 else "one cell pair")
    if fact["native"] == "emulated":
        state = (f"{precision} is emulated on this CPU (it lacks {MISSING_ISA[precision]}): ")
    elif fact["native"] == "native":
        state = f"{precision} is native on this CPU: "
    else:
        state = f"whether {precision} is native on this CPU was not recorded: "
    return f"On {cpu}, {state}{cost} ({spread})."


def emulation_note(models: pd.DataFrame) -> str | None:
    """HTML paragraphs, one per CPU and reduced precision; None without such cells."""
    facts = emulation_facts(models)
    if not facts:
        return None
    return "".join(f'<p class="note cpu-precision">{escape(sentence(f))}</p>' for f in facts)
