"""Every command the GPU acceptance check runs, in order, as argument lists (never a
shell), and the check that each runner's own parser accepts its command (``--dry``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from gpu_check.settings import (
    BATCH,
    COMMS_END,
    COMMS_GEMM,
    COMPILE_MODES,
    LLM_OUTPUT,
    LLM_PROMPT,
    LLM_SERVE_BATCHES,
    LLM_SERVE_COMPILE,
    LLM_TRAIN,
    MATMUL_N,
    NUM_BATCHES,
    PRECISIONS,
    SCRIPT,
    STUDY,
    WARMUP,
)


@dataclass
class Plan:
    """Every command the check runs, by name (argument lists, never a shell)."""

    out: Path
    python: str
    commands: dict[str, list[str]] = field(default_factory=dict)

    @property
    def cells(self) -> Path:
        """Where the runners' results go: <out>/<study>/cells/<name>.json, the layout the
        aggregate checks each result's study and cell id against."""
        return self.out / STUDY / "cells"

    def runner(self, name: str, module: str, *args: str) -> Path:
        result = self.cells / f"{name}.json"
        self.commands[name] = [self.python, "-m", module, *args, f"--study={STUDY}",
                               f"--cell_id={name}", f"--output={result}"]
        return result


def model_args(model: str, phase: str, precision: str, batch: int = BATCH,
               *extra: str) -> list[str]:
    return [f"--model={model}", f"--batch_size={batch}", "--device=gpu", f"--dtype={precision}",
            f"--forward_only={'true' if phase == 'inference' else 'false'}",
            f"--num_batches={NUM_BATCHES}", f"--num_warmup_batches={WARMUP}", *extra]


def matmul_config(path: Path, n: int) -> Path:
    tensor = {"type": "tensor", "dtype": "bfloat16", "shape": [n, n]}
    path.write_text(json.dumps({"torch.matmul": {"config": [
        {"input": [{"args": [tensor, tensor]}]}]}}))
    return path


def small_op_config(path: Path, elements: int) -> Path:
    tensor = {"type": "tensor", "dtype": "float", "shape": [elements]}
    path.write_text(json.dumps({"torch.add": {"config": [
        {"input": [{"args": [tensor, tensor]}]}]}}))
    return path


def build_plan(out: Path, python: str, gpus: int, autotune: bool) -> Plan:
    """Every command, in the order they run: what no other check covers first, so that a
    time budget spent early leaves out the slow extras (language models, compile modes)."""
    plan = Plan(out, python)
    plan.cells.mkdir(parents=True, exist_ok=True)
    for phase in ("training", "inference"):
        for precision in PRECISIONS:  # compared with each other: each from steady times
            plan.runner(f"resnet50_{phase}_{precision}", "dlbench.pytorch",
                        *model_args("resnet50", phase, precision, BATCH,
                                    "--warmup_until_steady=true"))
    me = str(SCRIPT)
    for part in ("honesty", "timer"):
        plan.commands[part] = [python, me, "--part", part, "--out", str(out)]
    ops = out / "ops"
    ops.mkdir(exist_ok=True)
    matmul = matmul_config(ops / "matmul.json", MATMUL_N)
    small = small_op_config(ops / "add_small.json", 1 << 20)  # 4 MiB: inside the L2
    tiny = small_op_config(ops / "add_tiny.json", 1 << 10)  # launch-bound
    # 1 GiB a tensor (about 1 ms an add): the discrete mode's launch and host sync, some
    # 15 µs, are under 2 % of it; on the 4 MiB add they are most of its time.
    large = small_op_config(ops / "add_large.json", 1 << 28)
    common = ["-d", "cuda", "-w", "10", "-i", "50", "-l", "WARNING"]
    plan.runner("op_matmul", "dlbench.ops", "-c", str(matmul), *common,
                "-o", str(ops / "matmul"))
    for cache in ("on", "off"):
        plan.runner(f"op_add_l2_{cache}", "dlbench.ops", "-c", str(small), *common,
                    "--cuda-l2-cache", cache, "-o", str(ops / f"add_l2_{cache}"))
    plan.runner("op_add_large", "dlbench.ops", "-c", str(large), *common,
                "-o", str(ops / "add_large"))
    plan.runner("op_add_events", "dlbench.ops", "-c", str(large), *common, "--exec-mode",
                "continuous_events", "-o", str(ops / "add_events"))
    for mode, flags in (("eager", []), ("cudagraph", ["--cuda-graph"]),
                        ("pt2", ["--pt2-model"])):
        plan.runner(f"op_add_tiny_{mode}", "dlbench.ops", "-c", str(tiny), *common, "-b",
                    *flags, "-o", str(ops / f"add_tiny_{mode}"))
    # DDP: one process through torchrun (the data-parallel path), and two GPUs over NCCL.
    plan.runner("resnet50_training_ddp1", "torch.distributed.run", "--standalone",
                "--nnodes=1", "--nproc_per_node=1", "-m", "dlbench.pytorch",
                *model_args("resnet50", "training", "bfloat16", 128, "--num_gpus=1"))
    if gpus >= 2:
        plan.runner("resnet50_training_ddp2", "dlbench.pytorch",
                    *model_args("resnet50", "training", "bfloat16", 128, "--num_gpus=2"))
    # Collectives over NCCL (dlbench.comms): a group of one, and two GPUs where there are,
    # each size's data validated (--c 1).
    # The same sweep on the most GPUs in non-blocking mode (PARAM's --z 0): 20 collectives
    # issued back to back per iteration, which the small sizes must show faster.
    # 16 B x 4^12 = COMMS_END: the sweep's last size is the one the check looks for.
    comms = ("dlbench.comms", "--device=gpu", "--collective=all_reduce", "--b=16",
             f"--e={COMMS_END}", "--f=4", "--w=5", "--n=20", "--c=1")
    for ranks in (1, 2) if gpus >= 2 else (1,):
        plan.runner(f"comms_nccl{ranks}", *comms, f"--num_gpus={ranks}")
    if gpus >= 2:  # point-to-point between two GPUs (NVLink or PCIe), messages validated
        plan.runner("comms_nccl2_pt2pt", *comms, "--num_gpus=2", "--pt2pt=one2one")
    most = 2 if gpus >= 2 else 1
    plan.runner(f"comms_nccl{most}_nonblocking", *comms, f"--num_gpus={most}", "--z=0",
                "--window=20")
    # The sweep over gloo on the GPU's tensors (PARAM's --backend gloo), validated.
    plan.runner("comms_gloo1", *comms, "--num_gpus=1", "--backend=gloo")
    # The blocking sweep again, timed by CUDA events (PARAM's --use-device-time).
    plan.runner("comms_nccl1_devicetime", *comms, "--num_gpus=1", "--use-device-time")
    # The blocking sweep as CUDA graphs of --n collectives, 10 replays timed (PARAM's
    # --graph-launches).
    plan.runner("comms_nccl1_graph", *comms, "--num_gpus=1", "--graph-launches=10")
    # One all_to_allv of uneven blocks (PARAM's --i), 256 MiB from each GPU, validated.
    elements = COMMS_END // 4
    weights = range(1, most + 1)
    blocks = [elements * w // sum(weights) for w in weights]
    blocks[-1] += elements - sum(blocks)
    plan.runner(f"comms_nccl{most}_a2av", "dlbench.comms", "--device=gpu",
                "--collective=all_to_allv", f"--num_gpus={most}",
                f"--i={','.join(map(str, blocks))}", "--w=5", "--n=20", "--c=1")
    # The same sweep beside bf16 GEMMs on a stream of their own (PARAM's comms-compute).
    plan.runner(f"comms_nccl{most}_gemm", *comms, f"--num_gpus={most}", "--kernel=gemm",
                "--num-compute=10", "--mm-dim", *map(str, COMMS_GEMM),
                "--comp-data-type=bfloat16")
    # And beside 64 MiB host-to-device copies from pinned memory (PCIe or C2C traffic).
    plan.runner(f"comms_nccl{most}_h2d", *comms, f"--num_gpus={most}", "--kernel=h2d",
                "--num-compute=4", "--mm-dim=4096", "--comp-data-type=float32")
    # And beside a recommendation model's embedding lookups (PARAM's emb_lookup): 8 tables
    # of 1 M rows x 128 (4 GiB), 2048 bags of 32 rows each, the gathers memory-bound.
    plan.runner(f"comms_nccl{most}_emb", *comms, f"--num_gpus={most}",
                "--kernel=emb_lookup", "--num-compute=1", "--ntables=8", "--num-embs=1000000",
                "--emb-dim=128", "--batch-size=2048", "--bag-size=32")
    from dlbench import study

    (cell,) = study.expand_config({"studies": {"gpu-check": {"grid": {
        "model": "resnet18", "phase": "inference", "batch_size": 32, "device": "gpu",
        "num_batches": 2, "num_warmup_batches": 1}}}})
    # An operator cell under the same ncu job: its inputs' calls lie in "measure" too, the
    # L2 flush between them in its own range, which the job leaves out.
    (op_cell,) = study.expand_config({"studies": {"gpu-check-ops": {"kind": "ops", "grid": {
        "op_config": str(small), "device": "gpu", "warmup": 1, "iterations": 2,
        "cuda_l2_cache": "off"}}}})
    for tool, settings, profiled in (("ncu", {"clock_control": "none"}, cell),
                                     ("torch", {}, cell),
                                     ("ncu_op", {"clock_control": "none"}, op_cell)):
        plan.commands[f"profile_{tool}"] = [
            python, "-m", "dlbench.profiling", "run", "--tool", tool.removesuffix("_op"),
            "--cell", profiled.to_json(), "--out_dir", str(out / "profiles" / tool),
            "--python", python, "--settings", json.dumps(settings)]
    # PARAM's --ncu: the inputs again, in a batch, under ncu, which writes its CSV log.
    ncu_args = ops / "ncu_args.txt"
    ncu_args.write_text("--clock-control none --metrics gpu__time_duration.sum\n")
    plan.runner("op_add_ncu_batch", "dlbench.ops", "-c", str(small), *common, "--ncu",
                "--ncu-args-file", str(ncu_args), "--ncu-warmup", "1", "--ncu-iteration", "2",
                "-o", str(ops / "add_ncu_batch"))
    # Measured ceilings: the calibration cell (GEMM per precision, STREAM copy/triad).
    plan.runner("calibration", "dlbench.calibrate", "--device", "gpu")
    serve = ("dlbench.llm", "--model=llama3_8b", "--device=gpu", "--dtype=bfloat16",
             f"--prompt_length={LLM_PROMPT}", f"--output_length={LLM_OUTPUT}",
             "--num_batches=3", "--num_warmup_batches=1", "--warmup_until_steady=true")
    for batch in LLM_SERVE_BATCHES:
        plan.runner(f"llm_serve_b{batch}", *serve, f"--batch_size={batch}")
    # The same decode replayed as CUDA graphs (dynamo, no inductor: seconds to compile):
    # eager decode at batch 1 is bound by the host's kernel launches.
    plan.runner(f"llm_serve_b1_{LLM_SERVE_COMPILE}", *serve, "--batch_size=1",
                f"--compile={LLM_SERVE_COMPILE}")
    for model, (batch, tokens) in LLM_TRAIN.items():
        opts = json.dumps({"sequence_length": tokens, "activation_checkpointing": True})
        plan.runner(f"llm_train_{model}", "dlbench.pytorch", f"--model={model}",
                    f"--batch_size={batch}", "--device=gpu", "--dtype=bfloat16",
                    "--forward_only=false", "--num_batches=10", "--num_warmup_batches=3",
                    f"--model_opts={opts}")
    if gpus >= 2:  # FSDP: built on the meta device, each GPU making its shard only
        model, (batch, tokens) = next(iter(LLM_TRAIN.items()))
        opts = json.dumps({"sequence_length": tokens, "activation_checkpointing": True,
                           "parallel": "fsdp"})
        plan.runner("llm_train_fsdp2", "dlbench.pytorch", f"--model={model}",
                    f"--batch_size={batch}", "--device=gpu", "--dtype=bfloat16",
                    "--forward_only=false", "--num_batches=10", "--num_warmup_batches=3",
                    "--num_gpus=2", f"--model_opts={opts}")
    plan.commands["llm_bare"] = [python, me, "--part", "llm_bare", "--out", str(out)]
    for mode in (*COMPILE_MODES, *(("inductor-max-autotune",) if autotune else ())):
        plan.runner(f"resnet50_training_bfloat16_{mode}", "dlbench.pytorch",
                    *model_args("resnet50", "training", "bfloat16", BATCH, f"--compile={mode}"))
    # The cells' result files are appended when they exist.
    plan.commands["aggregate"] = [python, "-m", "dlbench.aggregate", "--parquet",
                                  str(out / "benchmarks.parquet")]
    plan.commands["report"] = [python, "-m", "dlbench.report", str(out / "benchmarks.parquet"),
                               "--outdir", str(out / "report")]
    return plan


def check_plan_parses(plan: Plan) -> list[str]:
    """Each runner command against the runner's own parser (what --dry proves)."""
    from dlbench.calibrate.runner import parser as calibrate_parser
    from dlbench.comms.command_line import parser as comms_parser
    from dlbench.llm.runner import parser as llm_parser
    from dlbench.ops.cli import build_parser as ops_parser
    from dlbench.pytorch import runner

    problems = []
    for name, cmd in plan.commands.items():
        module = cmd[cmd.index("-m") + 1] if "-m" in cmd else None
        if module == "torch.distributed.run":
            module = cmd[cmd.index("-m", cmd.index("-m") + 1) + 1]
        args = cmd[cmd.index(module) + 1:] if module else []
        parser = {"dlbench.pytorch": runner.parser, "dlbench.ops": ops_parser,
                  "dlbench.calibrate": calibrate_parser, "dlbench.llm": llm_parser,
                  "dlbench.comms": comms_parser}.get(module)
        if parser is None:
            continue
        try:
            parser().parse_args(args)
        except SystemExit:
            problems.append(f"{name}: {' '.join(args)}")
    return problems
