"""The profiler registry: one module per tool, found by discovery, and everything that
names a tool (config check, schema, plan, tables, summary, finish) going through it.

A test profiler ("perf", declared here or as a module written into a package of its own)
stands for the next tool someone adds: its settings must reach the config check and the
schema, and each step of a job must reach its methods, without an edit anywhere else.
"""

import importlib
import json
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import jsonschema
import pytest
import yaml

from dlbench import study
from dlbench.profiling import config as pconfig
from dlbench.profiling import registry, run, summary, tables
from dlbench.profiling.base import Job, Profiler
from dlbench.profiling.commands import Plan, ProfileError, Step
from dlbench.profiling.spec import Choice, Int, ProfilingConfigError, Strings

REPO = Path(__file__).resolve().parents[1]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
BUILT_IN = ("torch", "ncu", "nsys", "hpcrun")


class Perf(Profiler):
    """A profiler that runs nothing real: it records which of its methods were called."""

    name = "perf"
    order = 50
    description = "Linux perf (test profiler)."
    settings = (
        Int("period", 1000, "Sample period.", minimum=1),
        Choice("mode", "user", "What is sampled.", choices=("user", "kernel")),
        Strings("events", ["cycles"], "perf -e events."),
    )

    def __init__(self):
        self.calls = []

    def plan(self, job):
        self.calls.append(("plan", job))
        return Plan(self.name, [Step("profiled run", ["perf", "record", *job.runner],
                                     runs_cell=True)], [("perf", "binary")], {})

    def convert(self, folder, settings):
        self.calls.append(("convert", folder, dict(settings)))
        return {"samples": "samples.parquet"}

    def finish(self, folder, settings, tables):
        self.calls.append(("finish", folder, tables))
        if settings["mode"] == "kernel":
            raise ProfileError("perf: kernel samples need perf_event_paranoid <= 1")

    def top_entries(self, directory, tables, n):
        self.calls.append(("top_entries", directory, dict(tables), n))
        return [{"name": "main", "calls": 1, "time_s": 1.0, "share": 1.0}]


@pytest.fixture
def perf(monkeypatch):
    """The built-in tools and Perf, as if tools/perf.py had been added."""
    profiler = Perf()
    built_in = registry.profilers()
    monkeypatch.setattr(registry, "profilers", lambda: (*built_in, profiler))
    return profiler


def tiny_cell():
    (cell,) = study.expand_config({"studies": {"s": {"grid": {
        "model": "deep_mnist", "device": "cpu", "batch_size": 2, "num_batches": 4,
        "num_warmup_batches": 1}}}})
    return cell


# Discovery


def test_every_tool_module_is_registered_in_order():
    assert registry.names() == BUILT_IN
    assert pconfig.TOOLS == BUILT_IN  # the workflow's {tool} wildcard
    modules = {p.stem for p in (REPO / "src/dlbench/profiling/tools").glob("*.py")
               if not p.name.startswith("_")}
    assert {type(p).__module__.rsplit(".", 1)[1] for p in registry.profilers()} == modules
    for profiler in registry.profilers():
        assert registry.get(profiler.name) is profiler
        assert profiler.description and profiler.settings and profiler.opens_in


def write_package(root, modules):
    """A package of tool modules under ``root`` (on sys.path); returns it imported."""
    name = f"fake_tools_{uuid.uuid4().hex[:8]}"
    (root / name).mkdir()
    (root / name / "__init__.py").write_text("")
    for module, text in modules.items():
        (root / name / f"{module}.py").write_text(textwrap.dedent(text))
    return importlib.import_module(name)


PERF_MODULE = """
    from dlbench.profiling.base import Profiler
    from dlbench.profiling.spec import Int


    class Perf(Profiler):
        name = "perf"
        order = 50
        description = "Linux perf."
        settings = (Int("period", 1000, minimum=1),)


    PROFILER = Perf()
"""


def test_adding_a_profiler_is_adding_one_module(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    package = write_package(tmp_path, {"perf": PERF_MODULE, "_helpers": "X = 1\n"})
    (found,) = registry.discover(package)  # modules starting with _ are not tools
    assert (found.name, [s.name for s in found.settings]) == ("perf", ["period"])


@pytest.mark.parametrize(("modules", "message"), [
    ({"perf": "X = 1\n"}, r"\.perf: no PROFILER"),
    ({"perf": PERF_MODULE, "perf2": PERF_MODULE}, "a second profiler named 'perf'"),
    ({"perf": PERF_MODULE.replace("Int(\"period\", 1000,", "Int(\"period\", 0,")},
     r"default refused: perf\.period: must be an integer >= 1, got 0"),
    ({"perf": PERF_MODULE.replace('(Int("period", 1000, minimum=1),)',
                                  '(Int("period", 1), Int("period", 2))')},
     "a setting is declared twice"),
])
def test_a_broken_tool_module_is_refused_when_loaded(tmp_path, monkeypatch, modules, message):
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(TypeError, match=message):
        registry.discover(write_package(tmp_path, modules))


def test_tool_modules_load_without_pyarrow():
    """The capture half runs where there is no pyarrow (the MXNet image): the registry, its
    tool modules, the plan and the config check must not import it."""
    code = ("import sys; from dlbench.profiling import config, registry, run; "
            "registry.profilers(); "
            "sys.exit('pyarrow imported' if 'pyarrow' in sys.modules else 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


# Unknown tools


@pytest.mark.parametrize("call", [
    lambda: registry.get("perf"),
    lambda: pconfig.settings("perf"),
    lambda: tables.convert("perf", Path("p")),
    lambda: run.build_plan("perf", {}, Path("p"), sys.executable, {}, None),
])
def test_an_unknown_tool_is_one_line(call):
    with pytest.raises(ProfilingConfigError) as info:
        call()
    assert str(info.value) == ("profiling.tools: unknown tool 'perf' "
                               f"(valid: {', '.join(BUILT_IN)})")


def test_an_unknown_tool_has_no_top_entries(tmp_path):
    assert summary.top_entries("perf", tmp_path, {"samples": "samples.parquet"}) == []


# Settings: the check and the schema come from the tool module


def test_a_tool_modules_settings_reach_the_config_check(perf):
    assert pconfig.settings("perf") == {"period": 1000, "mode": "user", "events": ["cycles"]}
    assert pconfig.settings("perf", {"mode": "kernel"})["mode"] == "kernel"
    config = {"studies": {"s": {"grid": {"model": "deep_mnist", "device": "cpu"}}},
              "profiling": {"select": [{"match": {"model": "deep_mnist"}, "tools": ["perf"]}],
                            "tools": {"perf": {"period": 10}}}}
    (job,) = pconfig.select_jobs(config, study.expand_config(config), system="box")
    assert job.tool == "perf" and pconfig.tool_settings(config, "perf")["period"] == 10
    for given, message in [
        ({"period": 0}, "profiling.tools.perf.period: must be an integer >= 1, got 0"),
        ({"mode": "both"}, "profiling.tools.perf.mode: unknown value 'both' "
                           "(valid: user, kernel)"),
        ({"event": []}, "profiling.tools.perf.event: unknown setting "
                        "(valid: period, mode, events)"),
    ]:
        config["profiling"]["tools"]["perf"] = given
        with pytest.raises(ProfilingConfigError) as info:
            pconfig.select_jobs(config, study.expand_config(config), system="box")
        assert str(info.value) == message


def test_a_tool_modules_settings_reach_the_schema(perf):
    fragment = registry.schema_fragment()
    assert fragment["properties"]["select"]["items"]["properties"]["tools"]["items"] == {
        "enum": [*BUILT_IN, "perf"]}
    assert fragment["properties"]["tools"]["properties"]["perf"] == {
        "type": "object", "additionalProperties": False,
        "description": "Linux perf (test profiler).",
        "properties": {
            "period": {"type": "integer", "minimum": 1, "description": "Sample period."},
            "mode": {"enum": ["user", "kernel"], "description": "What is sampled."},
            "events": {"$ref": "#/$defs/strings", "description": "perf -e events."}}}


def test_config_schema_holds_the_registrys_profiling_fragment():
    """Fails when a setting is added in a tool module and not in config.schema.yaml, or the
    other way round: `python -m dlbench.profiling.registry` prints what belongs there."""
    schema = yaml.safe_load(SCHEMA.read_text())
    assert schema["properties"]["profiling"] == registry.schema_fragment(), (
        "workflow/schemas/config.schema.yaml's profiling part differs from the tool modules' "
        "settings: replace it with the output of `python -m dlbench.profiling.registry`")
    printed = subprocess.run([sys.executable, "-m", "dlbench.profiling.registry"],
                             capture_output=True, text=True, check=True, timeout=120).stdout
    assert yaml.safe_load(printed) == {"profiling": registry.schema_fragment()}


def test_schema_and_check_agree_on_every_default_and_on_a_wrong_type():
    schema = yaml.safe_load(SCHEMA.read_text())
    validator = jsonschema.Draft202012Validator(
        {**schema["properties"]["profiling"], "$defs": schema["$defs"]})
    defaults = {tool: pconfig.settings(tool) for tool in BUILT_IN}
    validator.validate({"tools": defaults})
    for profiler in registry.profilers():
        for setting in profiler.settings:
            wrong = {"tools": {profiler.name: {setting.name: 1.5}}}
            assert not validator.is_valid(wrong), (profiler.name, setting.name)
            with pytest.raises(ProfilingConfigError):
                pconfig.settings(profiler.name, wrong["tools"][profiler.name])


# Dispatch: each step of a job reaches the tool's module


def test_build_plan_reaches_the_tool_with_the_runner_and_settings(perf, tmp_path):
    cell = json.loads(tiny_cell().to_json())
    settings = pconfig.settings("perf")
    plan = run.build_plan("perf", cell, tmp_path, sys.executable, settings, None)
    ((name, job),) = perf.calls
    assert name == "plan" and isinstance(job, Job)
    assert (job.out_dir, job.settings, job.cell) == (tmp_path, settings, cell)
    assert job.runner[-1] == "--monitor_interval_ms=0"  # the runner, monitor off
    assert plan.steps[0].argv == ["perf", "record", *job.runner]


def test_iterations_come_from_the_tool(tmp_path):
    """torch runs exactly its schedule's iterations; the others their num_batches."""
    cell = json.loads(tiny_cell().to_json())
    torch = run.build_plan("torch", cell, tmp_path, sys.executable,
                           pconfig.settings("torch", {"wait": 2, "active": 4}), None)
    assert "--num_batches=7" in torch.steps[0].argv  # 2 + 1 + 4
    nsys = run.build_plan("nsys", cell, tmp_path, sys.executable,
                          pconfig.settings("nsys", {"num_batches": 3}), None)
    assert {"--num_batches=3", "--num_warmup_batches=1"} <= set(nsys.steps[0].argv)


def test_tables_summary_and_finish_reach_the_tool(perf, tmp_path):
    settings = pconfig.settings("perf", {"period": 5})
    assert tables.convert("perf", tmp_path) == {"samples": "samples.parquet"}
    assert perf.calls[-1] == ("convert", tmp_path, pconfig.settings("perf"))  # defaults
    tables.convert("perf", tmp_path, settings)
    assert perf.calls[-1][2]["period"] == 5
    top = summary.top_entries("perf", tmp_path, {"samples": "samples.parquet"}, 3)
    assert top[0]["name"] == "main"
    assert perf.calls[-1] == ("top_entries", tmp_path, {"samples": "samples.parquet"}, 3)

    record = {"schema_version": 1, "tool": "perf", "study": "s", "cell_id": "c", "cell": {},
              "settings": settings, "status": "ok", "error": None, "commands": [],
              "artifacts": {}}
    run.write_record(tmp_path / pconfig.CAPTURE, record)
    manifest = run.finish("perf", tmp_path)
    assert manifest["tables"] == {"samples": "samples.parquet"}
    assert [c[0] for c in perf.calls[-2:]] == ["convert", "finish"]
    run.write_record(tmp_path / pconfig.CAPTURE, {**record, "settings": {**settings,
                                                                          "mode": "kernel"}})
    with pytest.raises(ProfileError, match="^perf: kernel samples need"):
        run.finish("perf", tmp_path)


def test_nsys_finish_fails_a_profile_without_data(tmp_path):
    settings = pconfig.settings("nsys")
    with pytest.raises(ProfileError) as info:
        registry.get("nsys").finish(tmp_path, settings, {})
    assert str(info.value) == ("nsys: no report has data (cuda_gpu_kern_sum, nvtx_sum): nothing "
                               "was captured (is the NVTX range 'measure' pushed?)")
    for tool in ("torch", "ncu", "hpcrun"):  # the default: nothing to check
        assert registry.get(tool).finish(tmp_path, pconfig.settings(tool), {}) is None


def test_cell_check_comes_from_the_tool():
    (mxnet,) = study.expand_config({"studies": {"m": {"grid": {
        "framework": "mxnet", "model": "resnet18", "device": "cpu"}}}})
    assert registry.get("nsys").check_cell(mxnet) is None
    # ncu profiles CUDA kernels: a CPU cell ran whole under it to "no kernel was profiled"
    assert registry.get("ncu").check_cell(mxnet) == (
        f"tool ncu profiles CUDA kernels; cell {mxnet.id} of study 'm' runs on the cpu (add "
        "device: gpu to match)")
    (gpu,) = study.expand_config({"studies": {"g": {"grid": {
        "framework": "mxnet", "model": "resnet18", "device": "gpu"}}}})
    assert registry.get("ncu").check_cell(gpu) is None
    assert registry.get("torch").check_cell(mxnet).startswith(
        f"tool torch profiles PyTorch model cells; cell {mxnet.id} of study 'm' is a mxnet "
        "model cell")
    assert registry.get("torch").check_cell(tiny_cell()) is None
    assert "add framework: pytorch" in registry.get("torch").check_cell(mxnet)
    (ops,) = study.expand_config({"studies": {"o": {"kind": "ops", "grid": {
        "op_config": "config/ops/cpu_demo.json", "device": "cpu"}}}})
    line = registry.get("torch").check_cell(ops)
    assert "is a pytorch ops cell" in line and "add framework" not in line  # it is pytorch
    assert "match its model cells" in line


def test_library_dirs_per_framework():
    assert run.library_dirs("pytorch") == ("torch", "lib")
    assert run.library_dirs("mxnet") == ("mxnet", "")
    assert run.library_dirs("jax") == ("torch", "lib")  # unknown: taken as PyTorch


def test_report_reads_tool_order_colours_and_viewers_from_the_registry():
    from dlbench.report import profiles

    assert dict(zip(BUILT_IN, range(len(BUILT_IN)), strict=True)) == profiles.TOOL_ORDER
    # each tool's viewer in the registry's order (a tool added later adds its own phrase)
    assert profiles.INTRO.startswith(
        "Each profile is a job apart from the measurement (profiling.select in the config). "
        "trace.json opens in Perfetto or chrome://tracing, .ncu-rep in Nsight Compute, "
        ".nsys-rep in Nsight Systems, an HPCToolkit database in hpcviewer")
    assert profiles.INTRO.endswith("; the Parquet tables hold every kernel or operator.")
    colours = {t: registry.get(t).colour for t in BUILT_IN}
    # the first tools keep the colours earlier reports drew them in; a new tool picks its own
    assert {"torch": "#ee4c2c", "ncu": "#76b900", "nsys": "#4c78a8",
            "hpcrun": "#b279a2"}.items() <= colours.items()
    assert len(set(colours.values())) == len(BUILT_IN)
    top_kinds = {t: registry.get(t).top_kind for t in BUILT_IN}
    assert {"torch": "operators", "ncu": "kernels", "nsys": "kernels",
            "hpcrun": "kernels"}.items() <= top_kinds.items()
    assert set(top_kinds.values()) <= {"operators", "kernels"}
