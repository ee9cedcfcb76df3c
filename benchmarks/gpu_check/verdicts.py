"""The GPU acceptance check's verdicts: each a line of the summary, its figure from the
results the commands wrote, pass, fail or skip (a command not run says why)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpu_check.settings import (
    BARE_RATIO,
    COMMS_END,
    COMMS_GEMM,
    COMPILE_MODES,
    EVENTS_AGREEMENT,
    EVENTS_VS_DISCRETE,
    LLM_BARE_RATIO,
    LLM_SERVE_BATCHES,
    LLM_SERVE_COMPILE,
    LLM_TRAIN,
    MATMUL_N,
    NOT_RUN,
    NOTHING_SKIPPED,
    PEAK_OVER_MEAN,
    PRECISIONS,
    RATIO_CEILING,
    TIMER_RATIO,
)


@dataclass
class Check:
    name: str
    verdict: str  # pass | fail | skip
    figure: str = ""
    detail: dict[str, Any] = field(default_factory=dict)


def read(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def throughput(res: dict[str, Any] | None) -> float | None:
    if not res or res.get("status") != "ok" or not res.get("measurements"):
        return None
    return res["measurements"][0]["throughput"]


def median_ms(res: dict[str, Any] | None) -> float | None:
    if not res or res.get("status") != "ok" or not res.get("measurements"):
        return None
    return res["measurements"][0]["time_s"]["median"] * 1e3


def duration(ms: float | None) -> str:
    """A median from ``median_ms`` as people read it: "18.3 µs", "1.25 ms"."""
    if ms is None:
        return "no result"
    return f"{ms * 1e3:,.1f} µs" if ms < 1 else f"{ms:,.2f} ms"


def verdict(ok: bool | None) -> str:
    return "skip" if ok is None else ("pass" if ok else "fail")


def stages_text(res: dict[str, Any] | None) -> str:
    """Where a cell's time went (dlbench.stages), for a check's line: "wall 31 s: startup
    6.1, build 2.0, ...": what a cell spends outside its measured iterations on this GPU."""
    stages = (res or {}).get("stages_s") or {}
    if not stages:
        return ""
    total = sum(stages.values())
    return f"wall {total:.0f} s: " + ", ".join(f"{k} {v:.1f}" for k, v in stages.items())


def drift_text(res: dict[str, Any] | None) -> str:
    """Whether a cell's iteration times rose or fell through its measured run
    (dlbench.drift): "drift +3.1%", with "(drifting)" where that is flagged."""
    from dlbench import drift

    measurements = (res or {}).get("measurements") or []
    found = drift.trend(measurements[0].get("times_s") or []) if measurements else None
    if found is None:
        return ""
    return f"drift {found.change:+.1%}" + (" (drifting)" if found.drifting else "")


def warmup_text(warmup: dict[str, Any] | None) -> str:
    """A warm-up until steady, for a check's line: "warm-up 27 iterations, settled" (a
    language model's counts generations)."""
    if not warmup:
        return ""
    unit = "generations" if "generations" in warmup else "iterations"
    return (f"warm-up {warmup[unit]} {unit}, "
            + ("settled" if warmup.get("settled") else "not settled"))


def model_checks(results: dict[str, dict | None]) -> list[Check]:
    checks = []
    for name, res in results.items():
        if not name.startswith("resnet50_") or "ddp" in name:
            continue
        tput = throughput(res)
        error = (res or {}).get("error") or "no result"
        first = ((res or {}).get("measurements") or [{}])[0]
        warmup = warmup_text((first.get("extra") or {}).get("warmup"))
        where = "; ".join(part for part in (warmup, drift_text(res), stages_text(res))
                          if part)
        checks.append(Check(f"{name} runs", verdict(tput is not None),
                            (f"{tput:,.0f} img/s" + (f" ({where})" if where else ""))
                            if tput else error, {"stages_s": (res or {}).get("stages_s")}))
    t = {p: throughput(results.get(f"resnet50_training_{p}")) for p in PRECISIONS}
    for fast in ("tf32", "bfloat16"):
        ok = None if None in (t[fast], t["float32"]) else t[fast] > t["float32"]
        checks.append(Check(f"training {fast} faster than float32", verdict(ok),
                            f"{t[fast] or 0:,.0f} vs {t['float32'] or 0:,.0f} img/s"))
    losses = {n: ((r or {}).get("measurements") or [{}])[0].get("extra", {}).get("last_loss")
              for n, r in results.items() if "training" in n and r and r.get("status") == "ok"}
    finite = {n: ((r or {}).get("measurements") or [{}])[0].get("extra", {}).get("loss_finite")
              for n, r in results.items() if "training" in n and r and r.get("status") == "ok"}
    fp16 = finite.get("resnet50_training_float16")
    checks.append(Check("float16 training (GradScaler) has a finite loss",
                        verdict(None if fp16 is None else bool(fp16)),
                        f"last loss {losses.get('resnet50_training_float16')}"))
    checks.append(Check("no training cell ends with a NaN loss",
                        verdict(all(finite.values()) if finite else None),
                        ", ".join(f"{n.removeprefix('resnet50_training_')}={v:.3g}"
                                  for n, v in losses.items() if v is not None)))
    checks.append(memory_check(results))
    eager = t["bfloat16"]
    for mode in (*COMPILE_MODES, "inductor-max-autotune"):
        res = results.get(f"resnet50_training_bfloat16_{mode}")
        if res is None:
            continue
        tput = throughput(res)
        comp = ((res.get("measurements") or [{}])[0].get("extra") or {}).get("compile") or {}
        checks.append(Check(f"compile {mode}: bf16 training", verdict(tput is not None),
                            f"{tput or 0:,.0f} img/s, "
                            + (f"{tput / eager:.2f}x eager" if eager else "eager not run")
                            + f", compile {comp.get('compile_time_s', 0):.0f} s"
                            if tput else res.get("error") or "no result", {"compile": comp}))
    return checks


def peak_bytes(res: dict[str, Any] | None) -> int | None:
    return (((res or {}).get("measurements") or [{}])[0].get("extra") or {}).get(
        "max_memory_allocated_bytes")


def memory_check(results: Mapping[str, dict | None]) -> Check:
    """bf16 inference (autocast: half-size activations) peaks below float32's: its peak is
    the measured steps' alone, not the accuracy check's float32 copy run after them."""
    low, full = (peak_bytes(results.get(f"resnet50_inference_{p}"))
                 for p in ("bfloat16", "float32"))
    ok = None if low is None or full is None else low < full
    return Check("inference bf16 peak memory below float32's", verdict(ok),
                 f"{(low or 0) / 2**30:.2f} vs {(full or 0) / 2**30:.2f} GiB allocated at peak")


BACKEND_NAMES = {"nccl": "NCCL", "gloo": "gloo"}


def comms_check(name: str, res: dict[str, Any] | None) -> Check:
    """A collective cell over the backend its name says (comms_nccl2, comms_gloo1): every
    size measured on that backend and its data validated; its figure the largest size's
    bus bandwidth (0 for a group of one) and median time."""
    # The message size from the measurement's name (a bidirectional point-to-point
    # test's bytes_per_iteration count both ways).
    from dlbench.comms.sizes import message_bytes

    # comms_<backend><ranks>[_<mode>]: comms_nccl2_pt2pt, comms_gloo1
    backend, _, mode = name.removeprefix("comms_").partition("_")
    ranks = "".join(c for c in backend if c.isdigit())
    backend = backend.removesuffix(ranks)
    collective = {"pt2pt": "pt2pt", "a2av": "all_to_allv"}.get(mode, "all_reduce")
    title = f"{collective} over {BACKEND_NAMES.get(backend, backend)}, {ranks} GPU(s)" \
        + (f", {mode}" if mode not in ("", "pt2pt", "a2av") else "")
    if res and res.get("status") == "not_run":
        return Check(title, "skip", res["error"])
    sizes = (res or {}).get("measurements") or []
    ok = bool(res) and res.get("status") == "ok" \
        and (res.get("extra") or {}).get("backend") == backend and bool(sizes) \
        and message_bytes(sizes[-1]["name"]) == COMMS_END \
        and all(m["extra"].get("validated") for m in sizes)
    if not sizes:
        return Check(title, verdict(False if res else None),
                     (res or {}).get("error") or "no result")
    last = sizes[-1]
    return Check(title, verdict(ok),
                 f"{len({message_bytes(m['name']) for m in sizes})} sizes validated; "
                 f"{message_bytes(last['name']) / 2**20:g} MiB in "
                 f"{last['time_s']['median'] * 1e6:,.0f} µs, bus {last['extra']['bus_gbps']:,.1f}"
                 " GB/s", {"bus_gbps": [m["extra"]["bus_gbps"] for m in sizes]})


def links_check(res: dict[str, Any] | None) -> Check:
    """What the collective cell's processes read of their links (dlbench.links): each
    GPU's PCI bus id and PCIe link (every GPU has one), its NVLinks; on 2+ GPUs the link
    that limits them and the largest size's share of it."""
    title = "links read (NVML, sysfs)"
    if not res or res.get("status") == "not_run":
        return Check(title, "skip", (res or {}).get("error") or "no result")
    readings = (res.get("extra") or {}).get("link_readings") or {}
    gpus = [g for node in readings.values() for g in node.get("gpus") or []]
    if not gpus:
        return Check(title, "fail", res.get("error") or "no GPU's links in the result")
    first = gpus[0]
    nvlink = (f"NVLink {first['nvlink_links']} x {first['nvlink_link_gbps']:g} GB/s"
              if first.get("nvlink_gbps") else f"{first.get('nvlink_links') or 0} NVLinks")
    network = next(iter(readings.values())).get("network") or {}
    link = res["extra"].get("link")
    ranks = res["extra"].get("group_ranks") or 1
    sizes = res.get("measurements") or []
    share = sizes[-1]["extra"].get("pct_of_link") if sizes else None
    ok = all(g.get("bus_id") and g.get("pcie_gbps") for g in gpus) \
        and (ranks < 2 or (link is not None and share is not None))
    return Check(title, verdict(ok),
                 f"{len(gpus)} GPU(s): {nvlink}, PCIe gen{first.get('pcie_generation')} "
                 f"x{first.get('pcie_width')} ({first.get('pcie_gbps') or 0:,.1f} GB/s); "
                 f"network {network.get('used') or 'none rated'}"
                 + (f"; limited by {link['text']}, largest size {share:.1f}% of it"
                    if link and share is not None else ""),
                 {"readings": readings, "link": link})


def _faster_at_smallest(title: str, base: dict[str, Any] | None,
                        other: dict[str, Any] | None, base_name: str, other_name: str
                        ) -> Check:
    """Two sweeps of one collective on as many GPUs: at the smallest size, where a blocking
    collective's host time is mostly the host's launch and wait, ``other`` must be faster."""
    times = []
    for res in (base, other):
        sizes = (res or {}).get("measurements") or []
        if not res or res.get("status") == "not_run" or not sizes:
            return Check(title, "skip" if not res or res.get("status") == "not_run"
                         else "fail", (res or {}).get("error") or "no result")
        times.append(sizes[0]["time_s"]["median"])
    ratio = times[1] / times[0]
    return Check(title, verdict(ratio < 1.0),
                 f"{times[1] * 1e6:,.1f} µs against {times[0] * 1e6:,.1f} µs {base_name} "
                 f"({ratio:.2f}x)", {f"{base_name}_s": times[0], f"{other_name}_s": times[1]})


def overlap_check(blocking: dict[str, Any] | None, nonblocking: dict[str, Any] | None
                  ) -> Check:
    """Non-blocking collectives against blocking ones: a window issued back to back must
    take less per collective at the smallest size."""
    return _faster_at_smallest("non-blocking collectives overlap (smallest size)", blocking,
                               nonblocking, "blocking", "nonblocking")


def graph_check(blocking: dict[str, Any] | None, graphed: dict[str, Any] | None) -> Check:
    """Collectives replayed from a CUDA graph (PARAM's --graph-launches) against blocking
    ones launched one by one: faster at the smallest size, where the host's launch is most
    of a collective's time (never run on a GPU before)."""
    return _faster_at_smallest("collectives launched as a CUDA graph (smallest size)",
                               blocking, graphed, "blocking", "graph")


def device_time_check(host: dict[str, Any] | None, device: dict[str, Any] | None) -> Check:
    """The sweep timed by CUDA events (PARAM's --use-device-time) against the same sweep on
    the host's clock: shorter at the smallest size, without the host's launch (the stream
    held while it is launched) and wait, and its result says CUDA events timed it. The
    figure adds the hold and how many launches outlasted it."""
    title = "collectives timed on the device, CUDA events (smallest size)"
    check = _faster_at_smallest(title, host, device, "host clock", "device")
    timer = ((device or {}).get("extra") or {}).get("timer")
    if check.verdict == "pass" and timer != "cuda_events":
        check.verdict, check.figure = "fail", f"timer {timer!r}, not CUDA events"
    sizes = (device or {}).get("measurements") or []
    hold = (sizes[0].get("extra") or {}).get("device_hold_s") if sizes else None
    if hold is not None and check.verdict != "skip":
        check.figure += (f"; stream held {hold * 1e6:,.0f} µs before each, "
                         f"{sizes[0]['extra'].get('late_launches', 0)} launch(es) outlasted it")
    return check


def compute_overlap_check(res: dict[str, Any] | None, kernel: str = "gemm") -> Check:
    """A collective sweep beside bf16 GEMMs (or host-to-device copies) on their own stream:
    the kernels timed alone and beside every size. Its figure: their TFLOP/s (a copy's
    GB/s) alone, their slowdown beside the largest size, and there the iteration's time
    against its two parts one after the other (less: the streams ran together)."""
    gemm = kernel == "gemm"
    what = {"gemm": "GEMMs", "emb_lookup": "embedding lookups"}.get(kernel, f"{kernel} copies")
    title = f"{what} beside NCCL collectives (comms-compute)"
    if res and res.get("status") == "not_run":
        return Check(title, "skip", res["error"])
    extra = (res or {}).get("extra") or {}
    alone, sizes = extra.get("compute_alone") or {}, (res or {}).get("measurements") or []
    beside = [(m.get("extra") or {}).get("compute_overlapped") or {} for m in sizes]
    rate = alone.get("tflops" if gemm else "gbps") or 0
    shape = alone.get("shape") or []  # a GEMM's m, n, p as PARAM's --mm-dim gave them
    ok = bool(res) and res.get("status") == "ok" and bool(sizes) and rate > 0 \
        and all((b.get("slowdown") or 0) > 0 for b in beside) \
        and (not gemm or list(shape) == list(COMMS_GEMM))
    if not ok:
        why = f"no {kernel} times beside the collectives"
        if not res or res.get("error"):
            why = (res or {}).get("error") or "no result"
        elif gemm and rate > 0 and list(shape) != list(COMMS_GEMM):
            why = f"GEMM shape {shape}, not PARAM's --mm-dim {list(COMMS_GEMM)}"
        return Check(title, verdict(False if res else None), why)
    last, slowdown = sizes[-1], beside[-1]["slowdown"]
    parts = last["time_s"]["median"] * extra.get("collectives_per_iteration", 1) \
        + beside[-1]["time_s"]["median"]
    iteration = last["extra"]["iteration_time_s"]["median"]
    return Check(title, "pass",
                 f"{'GEMM ' + '×'.join(map(str, shape)) if gemm else kernel} alone {rate:,.0f} "
                 f"{'TFLOP/s' if gemm else 'GB/s'}; beside "
                 f"{last['bytes_per_iteration'] / 2**20:g} MiB all_reduce {slowdown:.2f}x its "
                 f"time; iteration {iteration * 1e3:,.2f} ms against {parts * 1e3:,.2f} ms "
                 "of its parts one after the other",
                 {"rate_alone": rate, "slowdown": [b["slowdown"] for b in beside],
                  "iteration_s": iteration, "parts_s": parts})


def monitor_check(res: dict[str, Any] | None,
                  title: str = "monitor: NVML power and energy", per_item: bool = True) -> Check:
    """The resource monitor of a GPU cell: NVML power between idle and a board's limit,
    a peak not below the mean, energy and (``per_item``: a cell that counts samples)
    samples per joule. A collective sweep counts none: its monitor has no samples per
    joule, which would fail every sweep."""
    if res and res.get("status") == "not_run":
        return Check(title, "skip", res["error"])
    mon = ((res or {}).get("extra") or {}).get("monitor") or {}
    gpus = mon.get("gpus") or []
    power = gpus[0].get("power_mean_w") if gpus else None
    peak = gpus[0].get("power_max_w") if gpus else None
    # The peak is the draw of one interval, never below the phase's mean (a lagging
    # power reading once put it there).
    ok = bool(gpus) and power is not None and 30 <= power <= 1200 \
        and peak is not None and peak >= PEAK_OVER_MEAN * power \
        and (mon.get("energy_j") or 0) > 0 \
        and (not per_item or (mon.get("samples_per_joule") or 0) > 0)
    per_joule = (f", {mon['samples_per_joule']:,.2f} samples/J" if ok else
                 f", {mon.get('samples_per_joule')} samples/J") if per_item else ""
    figure = (f"mean {power:,.0f} W, peak {peak:,.0f} W, {mon['energy_j']:,.0f} J" if ok else
              f"mean {power} W, peak {peak} W, {mon.get('energy_j')} J") + per_joule
    return Check(title, verdict(ok if res else None), figure, {"monitor": mon})


def clocks_check(res: dict[str, Any] | None, title: str) -> Check:
    """The GPU's power limit and clock event reasons read by the monitor (NVML): readable
    is the verdict; how long the clocks were held back, and why, is the figure."""
    if res and res.get("status") == "not_run":
        return Check(title, "skip", res["error"])
    mon = ((res or {}).get("extra") or {}).get("monitor") or {}
    limit, held = mon.get("gpu_power_limit_w"), mon.get("gpu_clocks_held_back")
    clocks = ((mon.get("gpus") or [{}])[0].get("clocks") or {})
    ok = limit is not None and 50 <= limit <= 1500 and held is not None
    figure = (f"power limit {limit:,.0f} W; held back in {held:.0%} of "
              f"{clocks.get('samples')} samples ({mon.get('gpu_clock_reasons') or 'no reason'})"
              if ok else f"power limit {limit}, held back {held}")
    return Check(title, verdict(ok if res else None), figure,
                 {"clocks": clocks, "power_limit_w": limit})


def calibration_check(res: dict[str, Any] | None) -> Check:
    """The calibration's bf16 GEMM and copy bandwidth against the vendor's peak table: a
    measured ceiling above the datasheet, or below a third of it, is not believable. Where
    the GPU has FP8 tensor cores, the fp8 GEMM must also stay under its peak and beat bf16."""
    from dlbench import peaks

    if not res or res.get("status") != "ok":
        return Check("calibration: measured ceilings", verdict(None if not res else False),
                     (res or {}).get("error") or "no result")
    best: dict[str, float] = {}
    for m in res["measurements"]:
        key = m["name"].rsplit("_", 1)[0]  # gemm_bfloat16, copy_float32, ...
        best[key] = max(best.get(key, 0.0), m.get("tflops") or m.get("gbps") or 0.0)
    device = ", ".join(sorted(set(res["environment"].get("gpu_models") or []))) or None
    peak, bandwidth = peaks.peak_tflops(device, "bfloat16"), peaks.peak_bandwidth_gbps(device)
    gemm, copy = best.get("gemm_bfloat16"), best.get("copy_float32")
    ok = bool(gemm and copy) and (peak is None or peak / 3 <= gemm <= peak * 1.02) and \
        (bandwidth is None or bandwidth / 3 <= copy <= bandwidth * 1.02)
    fp8, fp8_peak = best.get("gemm_float8"), peaks.peak_tflops(device, "float8")
    if fp8:
        ok = ok and fp8 > (gemm or 0) and (fp8_peak is None or fp8 <= fp8_peak * 1.02)
    if fp8:
        fp8_words = f"; fp8 GEMM {fp8:,.0f} of {fp8_peak or '?'}"
    elif "float8" in (res["extra"].get("unsupported_precisions_not_measured") or []):
        fp8_words = "; no fp8 tensor cores"
    else:
        fp8_words = ""
    return Check("calibration: measured ceilings", verdict(ok),
                 f"bf16 GEMM {gemm or 0:,.0f} TFLOP/s of {peak or '?'} peak; copy "
                 f"{copy or 0:,.0f} GB/s of {bandwidth or '?'}{fp8_words}",
                 {"best": best, "device": device})


def facts_of(path: Path, name: str, not_run: Mapping[str, str]) -> dict[str, Any] | None:
    """What the command ``name`` wrote at ``path``, or {"error": why} where it did not run
    in this call (a file an earlier call left is not this one's)."""
    return {"error": not_run[name]} if name in not_run else read(path)


def op_checks(results: dict[str, dict | None], out: Path,
              not_run: Mapping[str, str] = NOTHING_SKIPPED) -> list[Check]:
    checks = []
    matmul = median_ms(results.get("op_matmul"))
    timer = facts_of(out / "timer.json", "timer", not_run) or {}
    if matmul:
        tflops = 2 * MATMUL_N ** 3 / (matmul / 1e3) / 1e12
        ratio = timer.get("median_ms", 0) / matmul if timer.get("median_ms") else None
        checks.append(Check("bf16 8192^3 matmul against torch.utils.benchmark.Timer",
                            verdict(None if ratio is None
                                    else TIMER_RATIO <= ratio <= RATIO_CEILING),
                            f"{tflops:,.0f} TFLOP/s, ratio "
                            + (f"{ratio:.3f}" if ratio else timer.get("error", "?"))
                            + (f"; normal data {timer['normal_data']['tflops']:,.0f} TFLOP/s"
                               if timer.get("normal_data") else ""), timer))
    else:
        checks.append(Check("bf16 8192^3 matmul", "fail",
                            (results.get("op_matmul") or {}).get("error") or "no result"))
    on, off = median_ms(results.get("op_add_l2_on")), median_ms(results.get("op_add_l2_off"))
    checks.append(Check("--cuda-l2-cache off is slower than on (4 MiB add)",
                        verdict(None if None in (on, off) else off > on),
                        f"off {duration(off)}, on {duration(on)}"))
    # On an add long enough that the discrete mode's launch and sync do not count: a few
    # µs apart on a 3 µs kernel are both modes right, each measuring what it says.
    events = median_ms(results.get("op_add_events"))
    discrete = median_ms(results.get("op_add_large"))
    ok = None if None in (events, discrete) else \
        abs(events - discrete) / discrete <= EVENTS_VS_DISCRETE
    checks.append(Check("continuous_events agrees with discrete (1 GiB add)", verdict(ok),
                        f"{duration(events)} vs {duration(discrete)}"))
    for mode in ("cudagraph", "pt2"):
        res = results.get(f"op_add_tiny_{mode}")
        facts = ((res or {}).get("measurements") or [{}])[0].get("extra") or {}
        acc = (facts.get("accuracy") or {}).get("ok")
        checks.append(Check(f"ops --{'cuda-graph' if mode == 'cudagraph' else 'pt2-model'}",
                            verdict((res or {}).get("status") == "ok" and acc is not False),
                            f"{duration(median_ms(res))} vs eager "
                            f"{duration(median_ms(results.get('op_add_tiny_eager')))}"
                            if (res or {}).get("status") == "ok"
                            else (res or {}).get("error") or "no result", facts))
    return checks


def fsdp_check(res: dict[str, Any] | None) -> Check:
    """A language model trained with FSDP on two GPUs (never run on a GPU before): finite
    loss; the figure says where the model was built (meta: each GPU made its shard only;
    the device: transformers before 5, the whole model first) and rank 0's share."""
    if res and res.get("status") == "not_run":
        return Check("FSDP over 2 GPUs", "skip", res["error"])
    m = ((res or {}).get("measurements") or [{}])[0]
    extra = m.get("extra") or {}
    ok = (res or {}).get("status") == "ok" and bool(extra.get("loss_finite"))
    held = extra.get("rank0_parameter_bytes")
    figure = (f"{m.get('throughput') or 0:,.0f} tokens/s; built on {extra.get('built_on')}, "
              f"rank 0 holds {(held or 0) / 2**30:,.2f} GiB of weights" if ok
              else (res or {}).get("error") or "no result")
    return Check("FSDP over 2 GPUs", verdict(ok if res else None), figure)


def llm_checks(results: dict[str, dict | None], out: Path,
               not_run: Mapping[str, str] = NOTHING_SKIPPED) -> list[Check]:
    """Language models: training tokens/s and MFU (an oom row is an answer too), inference
    TTFT and the decode steps' median (ITL p50, ``tpot_s``), and the runner against a bare
    loop on GPT-2 XL."""
    checks = []
    for model in LLM_TRAIN:
        res = results.get(f"llm_train_{model}") or {}
        m = (res.get("measurements") or [{}])[0]
        status = res.get("status")
        mfu = _mfu(res)
        figure = (f"{m.get('throughput') or 0:,.0f} tokens/s, {m.get('tflops') or 0:,.0f} "
                  f"TFLOP/s, MFU {mfu}" if status == "ok" else res.get("error") or "no result")
        ok = status == "ok" and bool(m.get("extra", {}).get("loss_finite")) or status == "oom"
        checks.append(Check(f"{model} bf16 training", verdict(ok if res else False), figure))
    for batch in LLM_SERVE_BATCHES:
        res = results.get(f"llm_serve_b{batch}") or {}
        extra = res.get("extra") or {}
        # null: a cell without decode steps (output_length 1)
        ttft, step = extra.get("ttft_s") or 0, extra.get("tpot_s") or 0
        ok = res.get("status") == "ok" and ttft > 0 and step > 0
        decode = [m for m in res.get("measurements") or [] if m.get("pass") == "decode"]
        gbps = decode[0].get("gbps") if decode else None
        warm = warmup_text(extra.get("warmup"))
        checks.append(Check(f"llama3_8b bf16 inference, batch {batch}", verdict(ok),
                            f"TTFT {1e3 * ttft:.1f} ms, ITL p50 (tpot_s) "
                            f"{1e3 * step:.2f} ms, "
                            f"{extra.get('output_tokens_per_s', 0):,.0f} output tokens/s"
                            + (f", decode reads >= {gbps:,.0f} GB/s" if gbps else "")
                            + (f"; {warm}" if warm else "")
                            if ok else res.get("error") or "no result", extra))
    checks.append(compiled_serving_check(results))
    facts = facts_of(out / "llm_bare.json", "llm_bare", not_run) or {}
    ratio = facts.get("ratio")
    checks.append(Check("gpt2_xl training: runner against a bare loop",
                        verdict(LLM_BARE_RATIO <= ratio <= RATIO_CEILING)
                        if ratio else "fail",
                        f"ratio {ratio:.4f}" if ratio else facts.get("error", "no figures"),
                        facts))
    return checks


def compiled_serving_check(results: Mapping[str, dict | None]) -> Check:
    """Llama-3-8B decode at batch 1 compiled: it runs, and its decode steps' median (ITL
    p50, ``tpot_s``) against eager's."""
    title = f"llama3_8b bf16 inference, batch 1, {LLM_SERVE_COMPILE}"
    res = results.get(f"llm_serve_b1_{LLM_SERVE_COMPILE}") or {}
    if res.get("status") == "not_run":
        return Check(title, "skip", res["error"])
    extra = res.get("extra") or {}
    tpot = extra.get("tpot_s") or 0
    ok = res.get("status") == "ok" and tpot > 0 and (extra.get("ttft_s") or 0) > 0
    if not ok:
        return Check(title, "fail", res.get("error") or "no result")
    eager = ((results.get("llm_serve_b1") or {}).get("extra") or {}).get("tpot_s")
    again = (extra.get("compile") or {}).get("recompilations_measured")
    return Check(title, "pass", f"TTFT {1e3 * extra['ttft_s']:.1f} ms, ITL p50 (tpot_s) "
                 f"{1e3 * tpot:.2f} ms"
                 + (f" ({eager / tpot:.2f}x eager's speed)" if eager else ", eager not run")
                 + (f", {again} compiled while measured" if again else ""), extra)


def _mfu(res: dict[str, Any]) -> str:
    from dlbench import peaks

    m = (res.get("measurements") or [{}])[0]
    device = ", ".join(sorted(set((res.get("environment") or {}).get("gpu_models") or [])))
    peak = peaks.peak_tflops(device or None, "bfloat16")
    return f"{m['tflops'] / peak:.1%}" if peak and m.get("tflops") else "? (no peak)"


def honesty_checks(out: Path, not_run: Mapping[str, str] = NOTHING_SKIPPED) -> list[Check]:
    facts = facts_of(out / "honesty.json", "honesty", not_run) or {}
    if "events_disagreement" not in facts:
        return [Check("timing honesty", "fail",
                      facts.get("error", "the honesty part left no figures"))]
    return [
        Check("runner times agree with CUDA events", verdict(
            facts["events_disagreement"] <= EVENTS_AGREEMENT),
            f"{facts['events_disagreement']:.2%} (runner {facts['runner_median_ms']:.2f} ms, "
            f"events {facts['events_median_ms']:.2f} ms)", facts),
        Check("runner against a bare loop",
              verdict(BARE_RATIO <= facts["bare_ratio"] <= RATIO_CEILING),
              f"ratio {facts['bare_ratio']:.4f}", facts),
    ]


def ncu_batch_check(res: dict[str, Any] | None) -> Check:
    """PARAM's --ncu: each launch exited 0 and its CSV log became a table of kernels."""
    name = "ops --ncu (PARAM's batch under ncu)"
    launches = ((res or {}).get("extra") or {}).get("nsight") or []
    if (res or {}).get("status") != "ok" or not launches:
        return Check(name, "fail", (res or {}).get("error") or "no ncu launch recorded")
    kernels = sum(launch.get("kernels") or 0 for launch in launches)
    errors = [launch["table_error"] for launch in launches if launch.get("table_error")]
    ok = all(launch["returncode"] == 0 for launch in launches) and kernels > 0 and not errors
    return Check(name, verdict(ok), f"{len(launches)} launch(es), {kernels} kernel launch(es) "
                 f"in their tables, exit codes {[launch['returncode'] for launch in launches]}"
                 + "".join(f"; {e}" for e in errors), {"launches": launches})


def profile_checks(out: Path, not_run: Mapping[str, str] = NOTHING_SKIPPED) -> list[Check]:
    checks = []
    for tool in ("ncu", "torch", "ncu_op"):
        record = facts_of(out / "profiles" / tool / "profile.json", f"profile_{tool}",
                          not_run) or {}
        checks.append(Check(f"profile {tool}", verdict(record.get("status") == "ok"),
                            record.get("error") or ", ".join(sorted(record.get("tables") or []))
                            or record.get("status", "no profile.json"), record))
        if tool == "ncu_op" and record.get("status") == "ok":
            checks.append(flush_excluded_check(out / "profiles" / tool))
    return checks


FLUSH_KERNEL = "FillFunctor"  # the kernel of the L2 flush (a uint8 buffer's fill_)


def flush_excluded_check(folder: Path) -> Check:
    """The operator cell's ncu profile (--cuda-l2-cache off) holds the add's kernels and
    none of the L2 flush's, whose NVTX range the job excludes."""
    import pyarrow.parquet as pq

    name = "ncu leaves the L2 flush out of an operator's profile"
    kernels = next(folder.rglob("kernels.parquet"), None)
    if kernels is None:
        return Check(name, "fail", "no kernels.parquet")
    names = pq.read_table(kernels, columns=["Kernel Name"]).column(0).to_pylist()
    flushes = sum(FLUSH_KERNEL in str(n) for n in names)
    return Check(name, verdict(bool(names) and not flushes),
                 f"{len(names)} kernel launch(es), {flushes} of them the flush's",
                 {"kernels": sorted(set(map(str, names)))})


def aggregate_check(rc: int, files: int, cells: Path, log: Path) -> Check:
    """The aggregate takes every result the runners wrote: one it sets aside as invalid
    (into cells/invalid/) is a result the suite's own table would not show."""
    invalid = sorted((cells / "invalid").glob("*.json")) if (cells / "invalid").is_dir() else []
    reasons = [line for line in (log.read_text().splitlines() if log.is_file() else [])
               if "invalid result file" in line]
    figure = f"{files - len(invalid)} of {files} results in the table"
    if rc != 0:
        figure += f"; aggregate rc {rc}"
    if reasons:
        figure += f"; first set aside: {reasons[0]}"
    return Check("results aggregate", verdict(rc == 0 and not invalid), figure)


def summary_markdown(checks: list[Check], device: str) -> str:
    lines = [f"# GPU acceptance on {device}", "", "| check | figure | verdict |", "|---|---|---|"]
    lines += [f"| {c.name} | {c.figure} | {c.verdict} |" for c in checks]
    failed = [c for c in checks if c.verdict == "fail"]
    lines += ["", f"{len(checks) - len(failed)} of {len(checks)} checks passed or skipped; "
                  f"{len(failed)} failed."]
    return "\n".join(lines) + "\n"


def checks_of(results: dict[str, dict | None], commands: Mapping[str, list[str]],
              out: Path, gpus: int, not_run: Mapping[str, str]) -> list[Check]:
    """Every verdict on the results of the plan's ``commands`` (``not_run``: those that did
    not run, and why: their checks are skipped, saying so)."""
    checks = model_checks(results)
    checks.append(monitor_check(results.get("resnet50_training_bfloat16")))
    # A collective cell's monitor, around its whole sweep (never run on a GPU before).
    checks.append(monitor_check(results.get("comms_nccl1"), "monitor: a collective sweep",
                                per_item=False))
    # What held the clocks back: a model's training steps, and the calibration's long GEMMs
    # (where a power limit shows).
    checks.append(clocks_check(results.get("resnet50_training_bfloat16"),
                               "clocks: bf16 training's power limit and reasons"))
    checks.append(clocks_check(results.get("calibration"),
                               "clocks: the calibration's power limit and reasons"))
    checks.append(calibration_check(results.get("calibration")))
    for name in ("resnet50_training_ddp1", "resnet50_training_ddp2"):
        if name in commands:
            res = results.get(name)
            checks.append(Check(f"DDP {name[-4:]}", verdict(throughput(res) is not None),
                                f"{throughput(res) or 0:,.0f} img/s"
                                if throughput(res) else (res or {}).get("error") or "no result"))
    if gpus < 2:
        checks.append(Check("DDP 2 GPUs over NCCL", "skip", f"{gpus} GPU on this machine"))
    if "llm_train_fsdp2" in commands:
        checks.append(fsdp_check(results.get("llm_train_fsdp2")))
    checks += [comms_check(name, results.get(name)) for name in commands
               if name.startswith("comms_")]
    # The links of the collective sweep on the most GPUs (read on a GPU for the first time).
    swept = [n for n in ("comms_nccl2", "comms_nccl1") if n in commands]
    if swept:
        checks.append(links_check(results.get(swept[0])))
    kernels = {"gemm": "gemm", "h2d": "h2d", "emb": "emb_lookup"}  # by the name's suffix
    checks += [compute_overlap_check(results.get(n), kernels[n.rpartition("_")[2]])
               for n in commands
               if n.startswith("comms_") and n.rpartition("_")[2] in kernels]
    overlapped = [n for n in commands if n.startswith("comms_") and "_nonblocking" in n]
    checks += [overlap_check(results.get(n.removesuffix("_nonblocking")), results.get(n))
               for n in overlapped]
    checks += [device_time_check(results.get(n.removesuffix("_devicetime")), results.get(n))
               for n in commands if n.startswith("comms_") and n.endswith("_devicetime")]
    checks += [graph_check(results.get(n.removesuffix("_graph")), results.get(n))
               for n in commands if n.startswith("comms_") and n.endswith("_graph")]
    checks += op_checks(results, out, not_run) + honesty_checks(out, not_run)
    checks += profile_checks(out, not_run) + llm_checks(results, out, not_run)
    checks.append(ncu_batch_check(results.get("op_add_ncu_batch")))
    for check in checks:
        if check.verdict == "fail" and check.figure.startswith(NOT_RUN):
            check.verdict = "skip"
    return checks
