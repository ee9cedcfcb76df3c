"""Framework containers: the definitions we ship, and the workflow under --use-singularity.

No Apptainer runtime or image registry is reachable here, so nothing is built or pulled:
the definition files are parsed with spython (what base, what they copy and install), and
the workflow runs with a test double named `apptainer` (and `singularity`) on PATH. The
double records its argv, then runs the command it was given on the host, with the "image"
file naming the interpreter folder that stands for the image's `python`. Not exercised:
a real image, `--nv` GPU passthrough, bind mounts.
"""

import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from spython.main.parse.parsers import DockerParser, SingularityParser

from dlbench import systems
from dlbench import workflow_support as support

REPO = Path(__file__).resolve().parents[1]
CONTAINERS = REPO / "containers"
MXNET_VENV = REPO / ".venvs" / "mxnet" / "bin"
NGC_PYTORCH = re.compile(r"^nvcr\.io/nvidia/pytorch:\d{2}\.\d{2}-py3$")
CUDA_BASE = re.compile(r"^nvidia/cuda:11\.\d+\.\d+-cudnn8-runtime-ubuntu22\.04$")


def recipe(path):
    parser = SingularityParser if path.suffix == ".def" else DockerParser
    (layer,) = parser(str(path)).recipe.values()
    return layer


def commands(layer):
    """The install steps as shell commands (continuation lines joined, comments dropped)."""
    lines = [line.rstrip("\n") for line in layer.install]
    text = "\n".join(line for line in lines if not line.lstrip().startswith("#"))
    return [c.strip() for c in re.split(r"\n|&&", text.replace("\\\n", " ")) if c.strip()]


def pip_installs(layer):
    """Each `pip install` command's requirements, options dropped, quotes removed."""
    out = []
    for cmd in commands(layer):
        match = re.search(r"\bpip install (.*)", cmd)
        if match:
            out.append({a.strip("\"'") for a in match.group(1).split() if not a.startswith("-")})
    return out


def copies(layer):
    """source -> destination folder, for the %files lines and COPY instructions."""
    pairs = {}
    for entry in layer.files:
        parts = entry.split() if isinstance(entry, str) else entry
        *sources, dest = parts
        for src in sources:
            pairs[src] = str(Path(dest) if not dest.endswith("/") else Path(dest) / src)
    return {src: str(Path(dest).parent) if Path(dest).name == Path(src).name else dest
            for src, dest in pairs.items()}


@pytest.mark.parametrize("framework", ["pytorch", "mxnet"])
def test_definition_and_dockerfile_build_the_same_environment(framework):
    apptainer = recipe(CONTAINERS / f"{framework}.def")
    docker = recipe(CONTAINERS / f"Dockerfile.{framework}")
    assert apptainer.fromHeader == docker.fromHeader
    assert pip_installs(apptainer) and sorted(map(sorted, pip_installs(apptainer))) == sorted(
        map(sorted, pip_installs(docker)))
    assert copies(apptainer) == copies(docker)


@pytest.mark.parametrize("framework", ["pytorch", "mxnet"])
def test_images_install_dlbench_from_the_copied_sources(framework):
    layer = recipe(CONTAINERS / f"{framework}.def")
    # The build copies the package sources and metadata (paths relative to the repository).
    assert copies(layer) == {"pyproject.toml": "/opt/dlbench", "README.md": "/opt/dlbench",
                             "src": "/opt/dlbench"}
    for source in copies(layer):
        assert (REPO / source).exists()
    cmds = commands(layer)
    assert any(re.search(r"pip install .*--no-deps /opt/dlbench$", c) for c in cmds)
    runner_deps = {"pyyaml", "jsonschema", "psutil", "nvidia-ml-py", "pillow"}
    assert any(runner_deps <= reqs for reqs in pip_installs(layer))
    # The workflow calls `python` inside the image, and checks the launcher is there.
    assert "python -m dlbench.launch --help > /dev/null" in cmds


def test_pytorch_image_is_nvidias_and_keeps_its_torch():
    layer = recipe(CONTAINERS / "pytorch.def")
    assert NGC_PYTORCH.match(layer.fromHeader), layer.fromHeader
    installed = set().union(*pip_installs(layer))
    assert not {"torch", "torchvision"} & installed  # never replace NVIDIA's build
    assert {"lmdb", "protobuf"} <= installed  # Caffe-LMDB reader
    assert any("import torch, torchvision, dlbench.pytorch.runner" in c for c in commands(layer))


def test_mxnet_image_is_a_cuda_base_with_mxnet_1_9_and_old_numpy():
    layer = recipe(CONTAINERS / "mxnet.def")
    assert CUDA_BASE.match(layer.fromHeader), layer.fromHeader
    installed = set().union(*pip_installs(layer))
    assert {"mxnet-cu112==1.9.1", "numpy<1.24"} <= installed
    # Ubuntu 22.04's python3 (3.10), reachable as `python`.
    assert any("python3-pip" in c and "python-is-python3" in c for c in commands(layer))


def test_containers_readme_gives_the_build_commands():
    text = (CONTAINERS / "README.md").read_text()
    for framework in ("pytorch", "mxnet"):
        assert (f"apptainer build --build-arg DLBENCH_GIT_REVISION=$(git rev-parse HEAD) \\\n"
                f"    containers/{framework}.sif containers/{framework}.def") in text
        assert f"docker build -f containers/Dockerfile.{framework}" in text


# The workflow under --use-singularity ---------------------------------------------------

APPTAINER_DOUBLE = """#!{python}
# Test double for apptainer/singularity: record argv; `exec ... IMAGE SHELL -c CMD` runs
# CMD on the host with the folder named in IMAGE first on PATH (the image's `python`).
import json, os, sys
with open({log!r}, "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
args = sys.argv[1:]
if args == ["--version"]:
    print("apptainer version 1.3.4")
    sys.exit(0)
assert args[0] == "exec", args
c = args.index("-c")
image, shell = args[c - 2], args[c - 1]
with open(image) as f:
    os.environ["PATH"] = f.read().strip() + os.pathsep + os.environ["PATH"]
os.execvp(shell, [shell, "-c", args[c + 1]])
"""


def tiny_image_folder(root):
    from PIL import Image

    for label, colour in (("cat", (200, 30, 30)), ("dog", (30, 30, 200))):
        (root / label).mkdir(parents=True)
        for i in range(2):
            Image.new("RGB", (40, 32), tuple(c + 10 * i for c in colour)).save(
                root / label / f"{i}.jpg")


@pytest.fixture(scope="module")
def container_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("containers")
    workdir, bin_dir, images = base / "work", base / "bin", base / "images"
    for d in (workdir, bin_dir, images):
        d.mkdir()
    calls = base / "apptainer-calls.jsonl"
    double = bin_dir / "apptainer"
    double.write_text(APPTAINER_DOUBLE.format(python=sys.executable, log=str(calls)))
    double.chmod(0o755)
    (bin_dir / "singularity").symlink_to(double)
    # The "images": each names the interpreter folder standing for the image's python.
    (images / "pytorch.sif").write_text(f"{Path(sys.executable).parent}\n")
    mxnet_bin = MXNET_VENV if (MXNET_VENV / "python").exists() else Path(sys.executable).parent
    (images / "mxnet.sif").write_text(f"{mxnet_bin}\n")
    outside = base / "datasets" / "pets"  # a user's dataset outside the working directory
    tiny_image_folder(outside)
    cell = {"num_batches": 1, "num_warmup_batches": 0, "batch_size": 2, "device": "cpu"}
    config = {
        "frameworks": {"pytorch": {"container": str(images / "pytorch.sif")},
                       "mxnet": {"container": str(images / "mxnet.sif"),
                                 "python": "/nonexistent/host/mxnet/python"}},
        "datasets": {"pets": {"path": str(outside)},
                     "syn": {"synthetic": {"classes": 2, "images_per_class": 2,
                                           "image_size": 32, "seed": 0}}},
        "studies": {
            "host_data": {"grid": {**cell, "model": "resnet18", "phase": "inference",
                                   "data": "pets", "data_backend": "image_folder"}},
            "prepared": {"grid": {**cell, "model": "resnet18", "phase": "inference",
                                  "data": "syn"}},
            "mx": {"grid": {**cell, "framework": "mxnet", "model": "deep_mnist"}},
            "gpu": {"grid": {**cell, "model": "deep_mnist", "device": "gpu"}},
        },
        # One profile: its run belongs in the cell's image, its tables on the host.
        "profiling": {"select": [{"match": {"study": "host_data"}, "tools": ["torch"]}]},
    }
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           # One visible "GPU": the gpu cell is given it, then fails without CUDA.
           "CUDA_VISIBLE_DEVICES": "5", "DLBENCH_GPU_LOCK_DIR": str(base / "gpu-locks")}
    env.pop("DLBENCH_GPU_ALLOCATION", None)
    snakemake = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"),
                 "--directory", str(workdir), "--configfile", str(workdir / "config.yaml")]
    proc = subprocess.run([*snakemake, "--use-singularity", "--cores", "2"], env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-5000:]
    # The same workflow without the flag: a dry run of what it would run on the host.
    host = subprocess.run([*snakemake, "-n", "-p"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert host.returncode == 0, host.stderr[-3000:]
    return {"workdir": workdir, "images": images, "outside": outside, "mxnet_bin": mxnet_bin,
            "calls": [json.loads(line) for line in calls.read_text().splitlines()],
            "host_dry_run": host.stdout + host.stderr}


def exec_calls(run):
    return [c for c in run["calls"] if c[0] == "exec"]


def result_files(run):
    return sorted((run["workdir"] / "results").glob("*/*/cells/*.json"))


@pytest.mark.slow
def test_each_cell_runs_in_its_frameworks_image_with_gpus_and_the_dataset_bound(container_run):
    results = result_files(container_run)
    assert len(results) == 4
    calls = [c for c in exec_calls(container_run) if "dlbench.launch" in c[-1]]
    assert len(calls) == len(results)  # one container per cell
    outside = str(container_run["outside"])
    for path in results:
        cell_id = path.stem
        (call,) = [c for c in calls if cell_id in c[-1]]
        framework = cell_id.split("_", 1)[0]
        c = call.index("-c")
        assert call[c - 2] == str(container_run["images"] / f"{framework}.sif")
        assert call[c - 1] == "bash" and "--nv" in call[:c - 2]
        assert ["--home", str(container_run["workdir"])] == call[1:3]
        # Datasets outside the working directory are bound into every cell's container.
        assert outside in [call[i + 1] for i, a in enumerate(call[:c]) if a == "--bind"]
        # Inside, the image's interpreter runs the launcher and the runner.
        command = call[c + 1]
        assert re.search(r"(^|; *)(exec )?python -m dlbench\.launch ", command), command
        assert "--python python " in command and support.this_python() not in command


@pytest.mark.slow
def test_a_profiled_run_is_in_the_cells_image_and_its_tables_on_the_host(container_run):
    """The profile's capture job runs in the PyTorch image, with --nv and the dataset bound,
    using the image's python; the finish job (Parquet, profile.json) runs on the host."""
    (call,) = [c for c in exec_calls(container_run) if "dlbench.profiling" in c[-1]]
    c = call.index("-c")
    assert call[c - 2] == str(container_run["images"] / "pytorch.sif") and "--nv" in call[:c]
    assert str(container_run["outside"]) in [call[i + 1] for i, a in enumerate(call[:c])
                                             if a == "--bind"]
    command = call[c + 1]
    assert re.search(r"(^|; *)python -m dlbench\.profiling capture ", command), command
    assert "--python python " in command and "finish" not in command
    (folder,) = (container_run["workdir"] / "results" / "profiles").glob("*/torch/*/*")
    manifest = json.loads((folder / "profile.json").read_text())
    assert manifest["status"] == "ok", manifest.get("error")
    assert manifest["cell"]["data"] == "pets" and manifest["commands"]
    assert pq.read_table(folder / manifest["tables"]["operators"]).num_rows > 0


@pytest.mark.slow
def test_data_preparation_aggregation_and_report_run_on_the_host(container_run):
    commands = " ".join(c[-1] for c in exec_calls(container_run))
    assert "dlbench.datasets" not in commands and "aggregate" not in commands
    assert "dlbench.profiling finish" not in commands
    results = container_run["workdir"] / "results"
    assert (results / "datasets" / "syn" / "caffe_lmdb").is_dir()
    assert (results / "benchmarks.parquet").exists()
    assert (results / "report" / "index.html").exists()


@pytest.mark.slow
def test_results_record_the_image_its_digest_and_the_framework_inside(container_run):
    rows = {r["study"]: r for r in pq.read_table(
        container_run["workdir"] / "results" / "benchmarks.parquet").to_pylist()}
    for study in ("host_data", "prepared"):
        assert rows[study]["status"] == "ok", rows[study]["error"]
    for study, framework in (("host_data", "pytorch"), ("mx", "mxnet")):
        image = container_run["images"] / f"{framework}.sif"
        env = json.loads(rows[study]["environment"])
        assert rows[study]["container"] == str(image)
        assert env["container_digest"] == "sha256:" + hashlib.sha256(image.read_bytes()).hexdigest()
    import torch

    assert rows["host_data"]["framework_version"] == torch.__version__
    if container_run["mxnet_bin"] == MXNET_VENV:  # the MXNet env exists: its runner ran
        assert rows["mx"]["status"] == "ok" and rows["mx"]["framework_version"] == "1.9.1"


@pytest.mark.slow
def test_gpu_cell_in_a_container_gets_its_gpu_from_the_allocator(container_run):
    (log,) = (container_run["workdir"] / "results" / systems.default_label() / "gpu" / "logs").glob("*.log")
    assert "dlbench.launch: CUDA_VISIBLE_DEVICES=5" in log.read_text()
    (path,) = (container_run["workdir"] / "results" / systems.default_label() / "gpu" / "cells").glob("*.json")
    assert json.loads(path.read_text())["status"] == "failed"  # no CUDA here


@pytest.mark.slow
def test_without_the_flag_the_same_rules_use_the_host_interpreters(container_run):
    """Leaving out --use-singularity changes each cell's software: Snakemake plans every
    cell again, with the host interpreters and no container."""
    out = container_run["host_dry_run"]
    commands = [line.split("Shell command:", 1)[-1].strip() for line in out.splitlines()
                if "-m dlbench.launch" in line]
    assert len(commands) == 4
    assert all(line.removeprefix("exec ").startswith(
        f"{shlex.quote(support.this_python())} -m dlbench.launch ") for line in commands)
    # the 4 cells and the profiled run (its launcher and runner python change too)
    assert out.count("reason: Params have changed since last execution") == 5
    profiled = [line.split("Shell command:", 1)[-1].strip() for line in out.splitlines()
                if "-m dlbench.profiling capture" in line]
    assert len(profiled) == 1 and profiled[0].startswith(
        f"{shlex.quote(support.this_python())} -m dlbench.profiling capture ")
    assert sum("--python /nonexistent/host/mxnet/python " in line for line in commands) == 1
    assert all("--container_image= " in line for line in commands)
    assert "apptainer" not in out.lower() and "singularity" not in out.lower()


def test_snakemake_lint_finds_software_for_the_benchmark_rules(tmp_path):
    """`snakemake --lint` asks for a conda env or a container per rule: the benchmark rules
    declare both (other rules may still be listed)."""
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(
        {"studies": {"s": {"grid": {"model": "deep_mnist", "framework": ["pytorch", "mxnet"]}}}}))
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--lint", "--snakefile",
                           str(REPO / "Snakefile"), "--directory", str(tmp_path),
                           "--configfile", str(tmp_path / "config.yaml")],
                          capture_output=True, text=True, timeout=300)
    text = proc.stdout + proc.stderr
    assert "Lints for" in text or "Congratulations" in text, text[-3000:]  # it did lint
    assert "Lints for rule benchmark_" not in text, text[-3000:]


def _names(requirements):
    """Distribution names of requirement strings, versions and markers dropped."""
    return {re.split(r"[<>=!~;\[ ]", r.strip(), maxsplit=1)[0].lower() for r in requirements
            if r.strip() and not r.strip().startswith("#") and r.strip() != "\\"}


def test_mxnet_image_and_conda_env_install_what_the_venv_requirements_list():
    """envs/mxnet.txt (the venv the tests run in) is the reference: the image and the conda
    env carry every package of it (the image's mxnet is the CUDA build), so that a reader
    that works in the tests (OpenCV decode, NVTX ranges) works in a container too."""
    wanted = _names(line.split("#")[0] for line in (REPO / "envs/mxnet.txt").read_text()
                    .splitlines())
    image = _names(set().union(*pip_installs(recipe(CONTAINERS / "mxnet.def"))))
    assert wanted - {"mxnet"} <= image and "mxnet-cu112" in image, wanted - image
    conda = yaml.safe_load((REPO / "envs/mxnet.yaml").read_text())["dependencies"]
    pip = next(d["pip"] for d in conda if isinstance(d, dict))
    assert wanted <= _names(pip), wanted - _names(pip)
