"""The README's `make run` from a fresh clone: set-up time and cell time, apart.

    python benchmarks/fresh_clone.py --out results/benchmarks/fresh_clone.json \
        [--python python3.12] [--test]

Clones this repository's HEAD into a new folder, runs ``make environments`` (set-up:
both environments; pip's cache is used as on any machine that installed before), then
``make run`` (the default study and its report), and with ``--test`` also ``make test``.
It records each command's wall time, the cells' own wall times from the Parquet (sum, and
the part in emulated precisions), the number of cells per status, the CPU and its
capability, and the Python that ran ``make`` (``make_python``). Exits non-zero when a
command fails; the clone is removed then too (unless ``--keep``), its logs stay beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from dlbench import cpu  # noqa: E402
from dlbench.result import write_atomic  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/_common, from anywhere
from _common import provenance  # noqa: E402


def timed(cmd: list[str], cwd: Path, log: Path, env: dict[str, str]) -> tuple[float, int]:
    start = time.perf_counter()
    with log.open("w") as handle:
        rc = subprocess.run(cmd, cwd=cwd, stdout=handle, stderr=subprocess.STDOUT,
                            env=env).returncode
    return time.perf_counter() - start, rc


def cell_times(parquet: Path, python: Path) -> dict[str, object]:
    """Sum of the cells' wall times, per status, and the emulated part (read with the
    clone's own pyarrow: this script needs nothing installed)."""
    code = (
        "import json, sys, pyarrow.parquet as pq\n"
        "t = pq.read_table(sys.argv[1]).to_pandas().drop_duplicates('source')\n"
        "emu = t[t.precision_native == False]\n"
        "print(json.dumps({'cells': len(t), 'cell_wall_s': float(t.wall_time_s.fillna(0).sum()),"
        " 'emulated_cells': len(emu), 'emulated_wall_s': float(emu.wall_time_s.fillna(0).sum()),"
        " 'statuses': t.status.value_counts().to_dict()}))\n")
    out = subprocess.run([str(python), "-c", code, str(parquet)], capture_output=True,
                         text=True)
    if out.returncode != 0:  # the timings already taken are still worth their JSON
        lines = out.stderr.strip().splitlines()
        return {"error": f"reading {parquet.name} failed (exit {out.returncode}): "
                         f"{lines[-1] if lines else 'no output on stderr'}"}
    return json.loads(out.stdout)


def python_version(python: str) -> str | None:
    """The version ``python`` reports, or None where it does not run."""
    if shutil.which(python) is None:
        return None
    proc = subprocess.run([python, "-c", "import platform; print(platform.python_version())"],
                          capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else None


def parse(argv: list[str] | None) -> tuple[argparse.Namespace, str]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    parser.add_argument("--python", default="python3", help="the PYTHON make uses")
    parser.add_argument("--test", action="store_true", help="also time make test")
    parser.add_argument("--keep", action="store_true", help="keep the clone")
    args = parser.parse_args(argv)
    version = python_version(args.python)
    if version is None:  # before the clone, not minutes into make
        parser.error(f"argument --python: {args.python} is not a Python interpreter that runs "
                     "here (give a name on PATH or a path to an executable)")
    return args, version


def main(argv: list[str] | None = None) -> int:
    args, python = parse(argv)
    folder = Path(tempfile.mkdtemp(prefix="dlbench-fresh-"))
    clone = folder / "dlbench"
    failed = True
    try:
        failed = measure(args, python, folder, clone)
    finally:
        if not args.keep:
            # The clone holds two environments (GBs); a failure's logs are kept beside it.
            shutil.rmtree(clone if failed else folder, ignore_errors=True)
    return 1 if failed else 0


def measure(args: argparse.Namespace, python: str, folder: Path, clone: Path) -> bool:
    """Clones, times each step and writes the JSON; True where a step failed."""
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
    if (REPO.parent / "shared").is_dir():  # CI's layout: shared/ beside the clone
        (folder / "shared").symlink_to(REPO.parent / "shared")
    env = {**os.environ, "PYTHON": args.python}
    info = cpu.this_cpu()
    report: dict[str, object] = {
        "benchmark": "fresh_clone", **provenance(), "commit": subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
            text=True).stdout.strip(),
        "make_python": f"{args.python} ({python})", "machine": platform.machine(),
        "cpu": info.as_dict() if info else None, "cpus": os.cpu_count(), "steps": {}}
    steps = [("setup", ["make", f"PYTHON={args.python}", "environments"]),
             ("run", ["make", f"PYTHON={args.python}", "run"])]
    if args.test:
        steps.append(("test", ["make", f"PYTHON={args.python}", "test"]))
    failed = False
    for name, cmd in steps:
        seconds, rc = timed(cmd, clone, folder / f"{name}.log", env)
        report["steps"][name] = {"wall_s": round(seconds, 1), "exit_code": rc,
                                 "log": str(folder / f"{name}.log")}
        print(f"{name}: {seconds:.0f} s (exit {rc})", file=sys.stderr)
        if name == "run" and rc == 0:
            report["cells"] = cell_times(clone / "results" / "benchmarks.parquet",
                                         clone / ".venv" / "bin" / "python")
            # the step timings are kept (the JSON below), and the exit code says it failed
            failed = failed or "error" in report["cells"]
        if rc != 0:
            failed = True
            break
    unavailable = clone / ".venvs" / "mxnet" / "unavailable.txt"
    report["mxnet"] = unavailable.read_text().strip() if unavailable.exists() else "built"
    write_atomic(args.out, json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))
    return failed


if __name__ == "__main__":
    sys.exit(main())
