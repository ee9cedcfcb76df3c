"""Build the MXNet environment (``.venvs/mxnet``) with a Python that MXNet 1.9.1 runs on.

MXNet 1.9.1 needs numpy < 1.24, and numpy 1.23 has wheels for CPython 3.8 to 3.11 only (on
3.12+ pip builds it from source and fails: distutils is gone). So the environment is made
with the first suitable interpreter found: ``$MXNET_PYTHON``, then ``python3.11`` ...
``python3.8`` on PATH, then ``uv python find``, then the interpreter running this script.
Where there is none, set-up still succeeds: ``<venv>/unavailable.txt`` says why in one
line, the launcher records the MXNet cells as ``skipped`` with that reason, and PyTorch
cells and the report are unaffected.

Standard library only: it runs under whatever ``python3`` the machine has.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

SUPPORTED = ((3, 8), (3, 11))  # numpy 1.23.5's wheels
UNAVAILABLE_FILE = "unavailable.txt"
HOW_TO_GET = ("install Python 3.11 with its venv module (e.g. apt-get install python3.11-venv, "
              "pyenv install 3.11 or uv python install 3.11) and run make mxnet-env again, "
              "or run MXNet cells in their container (containers/mxnet.def)")


def probe(python: str) -> tuple[int, int] | None:
    """The interpreter's version if it can make a venv with pip (ensurepip), else None."""
    try:
        out = subprocess.run(
            [python, "-c", "import sys, venv, ensurepip; print(*sys.version_info[:2])"],
            capture_output=True, text=True, timeout=60, check=True)
        major, minor = map(int, out.stdout.split())
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return major, minor


def candidates(environ: dict[str, str]) -> list[str]:
    path = environ.get("PATH", os.defpath)
    names = [environ.get("MXNET_PYTHON", "")]
    names += [shutil.which(f"python3.{minor}", path=path) or ""
              for minor in range(SUPPORTED[1][1], SUPPORTED[0][1] - 1, -1)]
    uv = shutil.which("uv", path=path)
    if uv:
        try:
            # Finds an installed one only: nothing is downloaded.
            found = subprocess.run([uv, "python", "find", "--no-python-downloads",
                                    f">={SUPPORTED[0][0]}.{SUPPORTED[0][1]},<3.12"],
                                   capture_output=True, text=True, timeout=60)
            names.append(found.stdout.strip() if found.returncode == 0 else "")
        except (OSError, subprocess.SubprocessError):
            pass
    names += [sys.executable, shutil.which("python3", path=path) or ""]
    seen: list[str] = []
    for name in names:
        if name and name not in seen:
            seen.append(name)
    return seen


def find_python(environ: dict[str, str]) -> tuple[str | None, list[str]]:
    """The first suitable interpreter, and what was tried (``path (version)``)."""
    tried = []
    for python in candidates(environ):
        version = probe(python)
        tried.append(f"{python} ({'.'.join(map(str, version)) if version else 'unusable'})")
        if version and SUPPORTED[0] <= version <= SUPPORTED[1]:
            return python, tried
    return None, tried


def build(python: str, venv: Path, requirements: Path, project: Path) -> None:
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    subprocess.run([*pip, "-r", str(requirements)], check=True)
    subprocess.run([*pip, "--no-deps", "-e", str(project)], check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", type=Path, default=Path(".venvs/mxnet"))
    parser.add_argument("--requirements", type=Path, default=Path("envs/mxnet.txt"))
    parser.add_argument("--project", type=Path, default=Path("."))
    parser.add_argument("--find-only", action="store_true",
                        help="print the interpreter that would be used, build nothing")
    args = parser.parse_args(argv)
    python, tried = find_python(dict(os.environ))
    if args.find_only:
        print(python or "none")
        return 0 if python else 1
    marker = args.venv / UNAVAILABLE_FILE
    if python is None:
        reason = (f"MXNet is unavailable: MXNet 1.9.1 needs Python 3.8-3.11 and none was found "
                  f"(tried {', '.join(tried)}); {HOW_TO_GET}")
        args.venv.mkdir(parents=True, exist_ok=True)
        marker.write_text(reason + "\n")
        print(f"mxnet_env: {reason}", file=sys.stderr)
        return 0
    print(f"mxnet_env: building {args.venv} with {python}", file=sys.stderr)
    marker.unlink(missing_ok=True)
    build(python, args.venv, args.requirements, args.project)
    (args.venv / ".installed").touch()
    return 0


if __name__ == "__main__":
    sys.exit(main())
