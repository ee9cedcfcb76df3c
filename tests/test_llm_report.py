"""The report's figures of language-model inference cells (dlbench.report.llm_charts):
decode's two statistics kept apart (TPOT over the generations, charted with its whisker;
ITL, the steps' own median, the decode row's time), a cell without decode steps, and what
its peak memory counts on each device. Real runner results through the aggregate where the
runner's own numbers matter."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from dlbench import aggregate
from dlbench import result as R
from dlbench.report import data as report_data
from dlbench.report import llm_charts

pytest.importorskip("transformers", reason="needs transformers")


def titles(figure) -> list[str]:
    return [c.title for c in figure.table.columns]


def runs(tpot_p50s: tuple[float, ...], device: str = "cpu", steps_median: float = 0.004
         ) -> list[dict]:
    """The aggregate's rows of one cell run once per TPOT p50 (its decode row's extra, the
    generations' figure), its decode steps' median (the decode row's time) apart from it."""
    common = {"study": "serve", "cell_id": f"r_{device}", "kind": "llm_inference",
              "status": "ok", "system": "box", "device": device, "framework": "pytorch",
              "model": "llama_tiny", "precision": "float32", "batch_size": 2,
              "prompt_length": 32, "output_length": 8, "name": "llama_tiny",
              "repeats": len(tpot_p50s)}
    rows = []
    for k, p50 in enumerate(tpot_p50s):
        cell_extra = {"kv_cache_bytes": 2**20, "peak_memory_bytes": 2**24}
        run = {**common, "source": f"r_{device}_r{k}.json", "repeat": k}
        decode_extra = {**cell_extra, "tpot_p50_s": p50, "tpot_p90_s": 2 * p50,
                        "tpot_p99_s": 3 * p50, "itl_p50_s": steps_median}
        rows += [{**run, "pass": "prefill", "throughput": 3200.0, "time_median_s": 0.02,
                  "cell_time_median_s": 0.02, "extra": json.dumps(cell_extra)},
                 {**run, "pass": "decode", "throughput": 2 / steps_median,
                  "time_median_s": steps_median, "cell_time_median_s": steps_median,
                  "extra": json.dumps(decode_extra)}]
    return rows


def test_tpot_is_the_generations_p50_beside_its_p90_and_p99_and_itl_is_apart():
    """The TPOT column and line were decode's median step (ITL p50) beside p90/p99 and a
    whisker over the generations: two statistics in one. TPOT p50 is now the mean over the
    runs of each run's p50 over its generations, and the steps' median is the ITL column."""
    frame = report_data.prepare(pd.DataFrame(runs((0.006, 0.010, 0.008))))
    (cell,) = llm_charts.llm_frame(frame).itertuples()
    assert (cell.tpot_ms, cell.tpot_p90_ms, cell.tpot_p99_ms) == pytest.approx((8, 16, 24))
    assert cell.itl_ms == pytest.approx(4.0)
    # a generation at TTFT and TPOT p50, the figures beside it
    assert cell.output_tokens_per_s == pytest.approx(2 * 8 / (0.02 + 7 * 0.008))
    latency = llm_charts.latency_figure(frame)
    mean = ": mean over the runs"
    assert {"TPOT p50 (ms)" + mean, "p90 (ms)" + mean, "p99 (ms)" + mean,
            "ITL (ms): mean of the runs' medians", "TTFT (ms): mean of the runs' medians",
            "prefill tokens/s"} <= set(titles(latency))
    assert not [t for t in titles(latency) if t.startswith(("TPOT (ms)", "median TPOT"))]
    assert "ITL" in latency.caption and "p50 over the generations" in latency.caption


def test_peak_memory_says_what_it_counts_on_each_device():
    """On a CPU it is the process's peak RSS over its life (interpreter and build too), on
    a GPU torch's allocations while it measured; the table said "peak memory" for both."""
    frame = report_data.prepare(pd.DataFrame([*runs((0.008,), "cpu"), *runs((0.008,), "gpu")]))
    cells = llm_charts.llm_frame(frame).set_index("device")
    assert "peak RSS" in cells.loc["cpu", "peak_memory_of"]
    assert "not the model's own" in cells.loc["cpu", "peak_memory_of"]
    assert "torch's allocations" in cells.loc["gpu", "peak_memory_of"]
    latency = llm_charts.latency_figure(frame)
    assert "peak memory of" in titles(latency) and "peak RSS" in latency.caption


def run_cell(folder: Path, cell_id: str, output_length: int) -> Path:
    out = folder / f"{cell_id}.json"
    proc = subprocess.run(
        [sys.executable, "-m", "dlbench.llm", "--device=cpu", "--model=gpt2_tiny",
         "--batch_size=2", "--prompt_length=8", f"--output_length={output_length}",
         "--num_batches=3", "--num_warmup_batches=1", "--study=serve",
         f"--cell_id={cell_id}", f"--output={out}"],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


def test_real_cells_through_the_aggregate_chart_tpot_itl_and_a_cell_without_decode(
        tmp_path):
    """One cell of 5 decode steps per generation and one of none (output_length 1: its
    decode statistics null, they were 0.0), from the runner through the aggregate."""
    decoding, single = run_cell(tmp_path, "o6", 6), run_cell(tmp_path, "o1", 1)
    res = R.read(single)
    assert [m["pass"] for m in res["measurements"]] == ["prefill"]
    assert res["extra"]["tpot_s"] is None
    assert res["extra"]["output_tokens_per_s"] == pytest.approx(2 / res["extra"]["ttft_s"])
    parquet = tmp_path / "benchmarks.parquet"
    aggregate.write([decoding, single], parquet)
    frame = llm_charts.llm_frame(report_data.load(parquet)).set_index("output_length")
    # the decoding cell: TPOT from the generations, ITL from the steps; the result's tpot_s
    # keeps its recorded meaning, the steps' median (ITL p50)
    res = R.read(decoding)
    decode = res["measurements"][1]
    assert res["extra"]["tpot_s"] == decode["time_s"]["median"] == decode["extra"]["itl_p50_s"]
    # Output tokens/s over each generation's own time (its TTFT and its 5 steps), the
    # median generation: a rate one of them reached (medians of different generations'
    # parts made one faster than any, 206 tokens/s beside generations of 126 at most).
    ttft, steps = res["measurements"][0]["times_s"], decode["times_s"]
    generations = [t + sum(steps[5 * i:5 * i + 5]) for i, t in enumerate(ttft)]
    assert res["extra"]["output_tokens_per_s"] == pytest.approx(
        2 * 6 / statistics.median(generations))
    assert frame.loc[6, "output_tokens_per_s"] == pytest.approx(
        res["extra"]["output_tokens_per_s"])
    # The monitor's items are the output tokens of the 3 measured generations (batch 2,
    # 6 tokens each): tokens per joule, not prompt and decode tokens added together.
    assert res["extra"]["monitor"]["items"] == 2 * 6 * 3
    assert frame.loc[6, "tpot_ms"] == pytest.approx(1e3 * decode["extra"]["tpot_p50_s"])
    assert frame.loc[6, "tpot_p99_ms"] == pytest.approx(1e3 * decode["extra"]["tpot_p99_s"])
    assert frame.loc[6, "itl_ms"] == pytest.approx(1e3 * decode["time_s"]["median"])
    # the cell without decode steps: no TPOT nor ITL, its TTFT the whole generation
    one = frame.loc[1]
    assert pd.isna(one["tpot_ms"]) and pd.isna(one["itl_ms"]) and pd.isna(one["tpot_p99_ms"])
    assert one["output_tokens_per_s"] == pytest.approx(2e3 / one["ttft_ms"])
    assert one["peak_memory_of"].startswith("the process (peak RSS")
    latency = llm_charts.latency_figure(report_data.load(parquet))
    assert latency.chart.to_dict()  # renders with a null TPOT


def test_cells_told_apart_by_num_batches_count_generations_not_iterations():
    """A language-model cell's batches are whole generations: two cells that differ in
    num_batches were "3 iterations" and "5 iterations" in the legend, titled "measured
    iterations" in the table."""
    rows = [{**row, "num_batches": n, "cell_id": f"r_{n}", "source": f"{n}{row['source']}"}
            for n in (3, 5) for row in runs((0.008,))]
    frame = report_data.prepare(pd.DataFrame(rows))
    data, _, encoding = llm_charts._prepared(frame)
    assert set(data["variant"]) == {"3 generations", "5 generations"}
    assert encoding.title("num_batches") == "measured generations"
    assert "measured generations" in titles(llm_charts.latency_figure(frame))
    assert not [t for t in titles(llm_charts.latency_figure(frame)) if "iteration" in t]
