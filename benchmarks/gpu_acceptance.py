"""GPU acceptance: every CUDA path of dlbench, run once on the GPU at hand, in one command.

    python benchmarks/gpu_acceptance.py --out results/gpu-check      # on a machine with a GPU
    python benchmarks/gpu_acceptance.py --out DIR --dry              # anywhere: the plan only

Runs our runners from this source tree as subprocesses (``PYTHONPATH=src``; nothing to
install): ResNet-50 training and inference in every precision, timing honesty against CUDA
events and a bare loop, operator timing against ``torch.utils.benchmark``, the L2 flush,
the resource monitor's NVML power and energy, DDP, compile modes, an ncu profile, language
models (training tokens/s and MFU, inference TTFT and TPOT, a bare-loop comparison), and the
report made from the results. The commands run in order of importance until ``--budget``
seconds are spent; the checks left without figures are skipped, saying so. Writes
``DIR/gpu_acceptance.json`` (every figure, every command), ``DIR/summary.md`` (one line per
check: figure and verdict) and ``DIR/gpu_acceptance.tar.gz`` (all it wrote: results, logs,
profiles, the report). Exit code: 0 all
passed (or skipped for a stated reason), 1 a check failed or no command ran at all (the
budget too short for one: a "measurements" check says so), 2 no CUDA device (one line)
or a bad flag (an ``--only`` name that matches no command, a budget not above 0).
``--dry`` builds every command line and checks it against the runner's own parser,
measures nothing (it writes the plan, ``plan.json``, to ``--out``), and exits 0: CI runs
it, so the script cannot rot between GPU sessions.

This script runs the commands and writes the outputs; the check's parts are beside it in
``benchmarks/gpu_check/``: ``settings`` (what runs, the thresholds), ``plan`` (every
command), ``verdicts`` (each summary line from the results) and ``parts`` (measurements
made in a process of their own). A new GPU path adds its command to the plan and its
verdict to ``verdicts.checks_of``.
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

# The check's parts live beside this script (benchmarks/gpu_check), found from anywhere.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import positive_float, provenance  # noqa: E402
from gpu_check.parts import part_honesty, part_llm_bare, part_timer  # noqa: E402
from gpu_check.plan import Plan, build_plan, check_plan_parses  # noqa: E402
from gpu_check.settings import (  # noqa: E402
    ARCHIVE_FILE_LIMIT,
    BUDGET_S,
    BUDGET_SPENT,
    MIN_SLOT,
    NOT_SELECTED,
    REPO,
    REPORT_TIMEOUT,
    SRC,
)
from gpu_check.verdicts import (  # noqa: E402
    Check,
    aggregate_check,
    checks_of,
    read,
    summary_markdown,
    verdict,
)

# -- running ------------------------------------------------------------------------------


def run(cmd: list[str], log: Path, timeout: float = 600) -> tuple[int, float]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(SRC), *filter(None, [os.environ.get("PYTHONPATH")])])}
    start = time.perf_counter()
    with log.open("w") as f:
        # Its own process group: a command stopped at its timeout takes its children
        # (torchrun's workers, ncu's target) with it, and no GPU stays held.
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=REPO,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = 124
    return rc, time.perf_counter() - start


def run_all(plan: Plan, gpus: int, budget: float, only: tuple[str, ...] | None = None,
            interim: Callable[[list[Check]], object] | None = None) -> list[Check]:
    """Runs the plan's commands in order until ``budget`` seconds are spent: a command that
    would start with less than MIN_SLOT left is not run, one still running at the end of the
    budget is stopped, and checks that had only those to go on are skipped (saying so).
    ``only``: name prefixes of the commands to run (a rerun of some checks). ``interim``
    is given the measurements' checks before the table and report are made: a call
    stopped while they run (the lent machine's time is up) still leaves their figures."""
    logs = plan.out / "logs"
    logs.mkdir(exist_ok=True)
    deadline = time.perf_counter() + budget
    timings: dict[str, dict[str, Any]] = {}
    not_run: dict[str, str] = {}
    for name, cmd in plan.commands.items():
        if name in ("aggregate", "report"):
            continue
        left = deadline - time.perf_counter()
        if only is not None and not name.startswith(only):
            not_run[name] = NOT_SELECTED
        elif left < MIN_SLOT:
            not_run[name] = BUDGET_SPENT
        if name in not_run:
            timings[name] = {"rc": None, "seconds": 0, "not_run": not_run[name]}
            print(f"{name}: {not_run[name]}", flush=True)
            continue
        rc, took = run(cmd, logs / f"{name}.log", timeout=min(600, left))
        if rc == 124 and took >= left - 1:
            not_run[name] = BUDGET_SPENT  # stopped by the budget, not by its own fault
        timings[name] = {"rc": rc, "seconds": round(took, 1)}
        print(f"{name}: rc {rc} in {took:.0f} s", flush=True)
    results = {name: read(plan.cells / f"{name}.json") for name in plan.commands}
    for name, reason in not_run.items():  # a file left by an earlier call is not this one's
        results[name] = {"status": "not_run", "error": reason}
    checks = checks_of(results, plan.commands, plan.out, gpus, not_run)
    if interim:
        interim(_with_timings(list(checks), timings))
    if all(t["rc"] is None for t in timings.values()):
        checks.append(nothing_ran(not_run))
    cells = sorted(str(plan.cells / f"{name}.json") for name in timings
                   if name not in not_run and (plan.cells / f"{name}.json").is_file())
    if not cells:  # only parts that write no cell ran (--only honesty): nothing to table
        for title in ("results aggregate", "report renders"):
            checks.append(Check(title, "skip", "no cell results in this call"))
        return _with_timings(checks, timings)
    agg = [*plan.commands["aggregate"], *cells]
    rc, _ = run(agg, logs / "aggregate.log", timeout=REPORT_TIMEOUT)
    checks.append(aggregate_check(rc, len(cells), plan.cells, logs / "aggregate.log"))
    if rc == 0 and shutil.which(plan.python) and _has("altair", plan.python):
        rc, _ = run(plan.commands["report"], logs / "report.log", timeout=REPORT_TIMEOUT)
        checks.append(Check("report renders", verdict(
            rc == 0 and (plan.out / "report" / "index.html").is_file()), f"rc {rc}"))
    else:
        checks.append(Check("report renders", "skip" if rc == 0 else "fail",
                            "altair is not installed here (carry it as a wheel)" if rc == 0
                            else f"aggregate rc {rc}"))
    return _with_timings(checks, timings)


def nothing_ran(not_run: dict[str, str]) -> Check:
    """A call that started no command measured nothing: every skip above is then no
    pass, and the exit code must say so."""
    reasons = sorted(set(not_run.values()))
    return Check("measurements", "fail", "no command ran in this call ("
                 + "; ".join(reasons) + f"; each needs at least {MIN_SLOT} s of the budget)")


def runnable(plan: Plan) -> list[str]:
    """The names ``--only`` may select (the aggregate and the report follow any run)."""
    return [name for name in plan.commands if name not in ("aggregate", "report")]


def unmatched(only: tuple[str, ...] | None, plan: Plan) -> str | None:
    """One line naming the ``--only`` prefixes no command of ``plan`` starts with."""
    names = runnable(plan)
    missing = [prefix for prefix in only or () if not any(n.startswith(prefix) for n in names)]
    if not missing:
        return None
    return (f"argument --only: {', '.join(missing)} matches no command here; the commands: "
            + ", ".join(names))


def _with_timings(checks: list[Check], timings: dict[str, Any]) -> list[Check]:
    for check in checks:
        check.detail.setdefault("timing", timings.get(check.name))
    return checks


def _has(module: str, python: str) -> bool:
    return subprocess.run([python, "-c", f"import {module}"], capture_output=True).returncode == 0


def archive(out: Path, largest: int = ARCHIVE_FILE_LIMIT) -> Path:
    """Everything the check wrote, in one file beside the summary (a lent machine sends back
    a few files, not folders of them); files over ``largest`` bytes (traces) stay out and
    are named in the archive's MANIFEST.txt."""
    target = out / "gpu_acceptance.tar.gz"
    left_out = []
    with tarfile.open(target, "w:gz") as tar:
        for path in sorted(out.rglob("*")):
            if not path.is_file() or path == target:
                continue
            if path.stat().st_size > largest:
                left_out.append(f"{path.relative_to(out)} ({path.stat().st_size} bytes)")
                continue
            tar.add(path, arcname=str(path.relative_to(out)))
        manifest = "\n".join(["left out (over the size limit):", *left_out]).encode()
        info = tarfile.TarInfo("MANIFEST.txt")
        info.size = len(manifest)
        tar.addfile(info, io.BytesIO(manifest))
    return target


class NoTorch(RuntimeError):
    """This interpreter cannot import torch (one line: its last error line)."""


def cuda_device() -> tuple[str | None, int]:
    """The GPU's name and count, or (None, 0) with no CUDA device (checked in a child, so
    that this process initialises no CUDA context the runners would share). NoTorch where
    the interpreter cannot import torch: that is no word on the machine's GPUs."""
    probe = ("import torch, json; ok = torch.cuda.is_available(); print(json.dumps("
             "[torch.cuda.get_device_name(0) if ok else None, torch.cuda.device_count()]))")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        why = lines[-1] if lines else f"rc {proc.returncode}"
        raise NoTorch(f"{sys.executable} cannot import torch ({why}); run it with the "
                      "interpreter that has torch (make gpu-check GPU_PYTHON=...)")
    try:
        name, count = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None, 0
    return name, count


@functools.cache
def software() -> dict[str, Any]:
    """torch, its CUDA and cuDNN (from a child, as ``cuda_device``) and the driver (NVML,
    which makes no CUDA context), for the top of gpu_acceptance.json."""
    probe = ("import torch, json; c = torch.backends.cudnn; print(json.dumps({"
             "'torch': torch.__version__, 'cuda': torch.version.cuda, "
             "'cudnn': c.version() if c.is_available() else None}))")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    try:
        facts = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        facts = {"torch": None, "cuda": None, "cudnn": None}
    from dlbench.environment import gpus_from_nvml

    return {**facts, "gpu_driver": gpus_from_nvml().get("gpu_driver")}


def names(text: str) -> tuple[str, ...]:
    """An argparse type: comma-separated name prefixes, at least one."""
    found = tuple(filter(None, (name.strip() for name in text.split(","))))
    if not found:
        raise argparse.ArgumentTypeError(f"names no command: {text!r}")
    return found


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("results/gpu-check"))
    p.add_argument("--dry", action="store_true",
                   help="build and check the plan (written to --out as plan.json, with the "
                        "operator configs it names); measure nothing")
    p.add_argument("--budget", type=positive_float, default=BUDGET_S, metavar="SECONDS",
                   help=f"run the checks in order until this is spent (default {BUDGET_S}); "
                        "the rest are skipped, saying so")
    p.add_argument("--only", type=names, default=None,
                   metavar="PREFIX,...", help="run only the commands whose names start so "
                   "(e.g. honesty,llm_); the other checks are skipped, saying so")
    p.add_argument("--autotune", action="store_true",
                   help="also inductor-max-autotune (its autotuning takes minutes)")
    p.add_argument("--part", choices=("honesty", "timer", "llm_bare"), help=argparse.SUPPRESS)
    return p


PARTS = {"honesty": part_honesty, "timer": part_timer, "llm_bare": part_llm_bare}


def dry(args: argparse.Namespace, p: argparse.ArgumentParser) -> int:
    plan = build_plan(args.out, sys.executable, gpus=2, autotune=True)
    if problem := unmatched(args.only, plan):
        p.error(problem)
    try:  # the runners' own parsers, which import torch
        problems = check_plan_parses(plan)
    except ImportError as exc:
        print(f"gpu_acceptance: --dry checks the commands with the runners' parsers, "
              f"which need torch: {exc} (run it with the interpreter that has torch)",
              file=sys.stderr)
        return 2
    (args.out / "plan.json").write_text(json.dumps(plan.commands, indent=1))
    for name, cmd in plan.commands.items():
        print(f"{name}: {shlex.join(cmd)}")  # quoted: each line pastes into a shell
    if problems:
        print("gpu_acceptance: commands the runners refuse: " + "; ".join(problems),
              file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    sys.path.insert(0, str(SRC))
    args.out.mkdir(parents=True, exist_ok=True)
    if args.part:
        PARTS[args.part](args.out)
        return 0
    if args.dry:
        return dry(args, p)
    try:
        device, count = cuda_device()
    except NoTorch as exc:
        print(f"gpu_acceptance: {exc}", file=sys.stderr)
        return 2
    if device is None:
        print("gpu_acceptance: no CUDA device: torch sees no GPU on this machine (run it "
              "where one is, or add --dry to check the plan)", file=sys.stderr)
        return 2
    plan = build_plan(args.out, sys.executable, count, args.autotune)
    if problem := unmatched(args.only, plan):
        p.error(problem)
    start = time.perf_counter()
    made = {**provenance(), **software()}

    def write(checks: list[Check]) -> str:
        report = {**made, "device": device, "gpus": count,
                  "seconds": round(time.perf_counter() - start), "budget_s": args.budget,
                  "checks": [asdict(c) for c in checks], "commands": plan.commands}
        (args.out / "gpu_acceptance.json").write_text(
            json.dumps(report, indent=1, default=str))
        text = summary_markdown(checks, f"{count}x {device}")
        (args.out / "summary.md").write_text(text)
        archive(args.out)
        return text

    checks = run_all(plan, count, args.budget, args.only, interim=write)
    print(write(checks))
    return 1 if any(c.verdict == "fail" for c in checks) else 0


if __name__ == "__main__":
    sys.exit(main())
