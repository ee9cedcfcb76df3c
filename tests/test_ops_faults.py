"""Odd op config files: whatever a file holds, ``python -m dlbench.ops`` ends in one line
naming the file (and the operator, where there is one), never a traceback, and the
result says ``failed`` with that line: an empty object is bad input, not a skip."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dlbench import result as R
from dlbench.cellrun import CellError
from dlbench.ops import configfile, iterators
from dlbench.ops.cli import main

GOOD_OP = {"config": [{"input": [{"args": [{"type": "tensor", "dtype": "float", "shape": [2]},
                                           {"type": "tensor", "dtype": "float", "shape": [2]}]}]}]}


def run_ops(tmp_path: Path, config: Path, *flags: str):
    """Run the CLI in-process: (exit code, JSON-lines records, result document)."""
    out, result_path = tmp_path / "out", tmp_path / "out_result.json"
    code = main(["-c", str(config), "-o", str(out), "--output", str(result_path),
                 "-l", "WARNING", *flags])
    jsonl = tmp_path / "out.json"
    lines = [json.loads(line) for line in jsonl.read_text().splitlines()] if jsonl.exists() else []
    return code, lines, R.read(result_path)


def genericlist(depth: int) -> str:
    return '{"type": "genericlist", "value": [' * depth + "]}" * depth


# Whole-file faults: (file name, content, the error after "config <path>: ")
FILE_FAULTS = [
    ("empty_object.json", b"{}", "holds no operators (an empty JSON object)"),
    ("empty_object_spaced.json", b" {\n }\n", "holds no operators (an empty JSON object)"),
    ("not_utf8.json", b"\xff\xfe\x00garbage", "not UTF-8 text, so not JSON (byte 0xff at offset 0)"),
    ("latin1.json", '{"torch.add": {"config": [], "x": "\u00e9"}}'.encode("latin-1"),
     "not UTF-8 text, so not JSON (byte 0xe9 at offset 35)"),
    ("bom_then_bad.json", b"\xef\xbb\xbf{\xff}", "not UTF-8 text, so not JSON (byte 0xff at offset 4)"),
    ("empty.json", b"", "empty, not JSON (expected an object of operator name: spec)"),
    ("blank.json", b" \n\t\n", "empty, not JSON (expected an object of operator name: spec)"),
    ("list.json", b'[{"torch.add": {}}]',
     "an array at the top level, not an object of operator name: spec"),
    ("string.json", b'"torch.add"', "a string at the top level, not an object of operator name: spec"),
    ("null.json", b"null", "null at the top level, not an object of operator name: spec"),
    ("number.json", b"NaN", "a number at the top level, not an object of operator name: spec"),
    ("syntax.json", b'{"torch.add": {', "not JSON (Expecting property name enclosed in double "
                                        "quotes at line 1, column 16)"),
    ("two_documents.json", b'{"a": 1}\n{"b": 2}', "not JSON (Extra data at line 2, column 1)"),
    ("unterminated.json", b'{"a": "b', "not JSON (Unterminated string starting at line 1, "
                                          "column 7)"),
    ("deep_arrays.json", b"[" * 100_000 + b"]" * 100_000,
     "nested more than 64 levels deep, not an op config"),
    ("deep_objects.json", b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
     "nested more than 64 levels deep, not an op config"),
    # deep enough to exhaust the recursion of the runner, though not of the JSON reader
    ("deep_spec.json", ('{"torch.add": {"config": [{"input": [{"args": ['
                        + genericlist(300) + "]}]}]}}").encode(),
     "nested more than 64 levels deep, not an op config"),
    ("long_number.json", b'{"torch.add": {"config": [{"input": [{"args": [{"type": "int", '
                         b'"value": ' + b"9" * 5000 + b"}]}]}]}}",
     f"a number of more than {sys.get_int_max_str_digits()} digits"),
    ("duplicate_op.json", b'{"torch.add": {"config": []}, "torch.add": {"config": []}}',
     "operator 'torch.add' is given twice in one object (JSON would keep only the last)"),
    ("duplicate_key.json", b'{"torch.add": {"config": [{"input": [{"args": [{"type": "int", '
                           b'"type": "float", "value": 1}]}]}]}}',
     "key 'type' is given twice in one object (JSON would keep only the last)"),
]


@pytest.mark.parametrize("name,content,error", FILE_FAULTS, ids=[f[0] for f in FILE_FAULTS])
def test_a_bad_file_fails_in_one_line_naming_it(tmp_path, caplog, name, content, error):
    path = tmp_path / name
    path.write_bytes(content)
    code, lines, res = run_ops(tmp_path, path)
    assert code == 1 and lines == []  # nothing ran, not even the JSON-lines header
    assert res["status"] == "failed"
    assert res["error"] == f"config {path}: {error}"
    assert "Traceback" not in caplog.text
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == [
        f"cell failed: config {path}: {error}"]
    with pytest.raises(CellError) as caught:
        configfile.load(path)
    assert str(caught.value) == f"config {path}: {error}"


# Faults of one operator: (config, the operator's error in the JSON-lines file)
OP_FAULTS = [
    ({"torch.add": 5},
     'torch.add: expected an object with a "config" list (and optional iterators and data '
     "generators), got a number"),
    ({"torch.add": [GOOD_OP]},
     'torch.add: expected an object with a "config" list (and optional iterators and data '
     "generators), got an array"),
    ({"torch.add": {"config": []}}, "torch.add: config: an empty list, no inputs to run"),
    ({"torch.add": {"config": [{"input": []}]}},
     "torch.add: config[0].input: an empty list, no inputs to run"),
    ({"torch.add": {"config": [5]}},
     'torch.add: config[0]: expected an object with "input" (and "build"), got a number'),
    ({"torch.add": {**GOOD_OP, "input_iterator": ["RangeConfigIterator"]}},
     "torch.add: input_iterator: unknown iterator ['RangeConfigIterator'] "
     "(valid: DefaultConfigIterator, RangeConfigIterator)"),
    ({"torch.add": {**GOOD_OP, "build_iterator": {"name": "x"}}},
     "torch.add: build_iterator: unknown iterator {'name': 'x'} "
     "(valid: DefaultConfigIterator, RangeConfigIterator)"),
    ({"": {"config": []}}, "'': config: an empty list, no inputs to run"),
    ({"torch.add\nrm -rf": {"config": []}}, "torch.add\\nrm -rf: config: an empty list, no inputs to run"),
    ({"torch.add\nx": GOOD_OP},
     "torch.add\\nx: unknown operator (not a public name)"),
]


@pytest.mark.parametrize("config,error", OP_FAULTS)
def test_a_bad_operator_fails_the_cell_in_one_line_naming_file_and_operator(
        tmp_path, caplog, config, error):
    path = tmp_path / "ops.json"
    path.write_text(json.dumps(config))
    code, lines, res = run_ops(tmp_path, path)
    errors = [line for line in lines if "error" in line]
    assert [e["error"] for e in errors] == [error]
    assert code == 1 and res["status"] == "failed"
    assert res["error"] == f"config {path}: {error}"
    assert [e["error"] for e in res["extra"]["errors"]] == [error]
    assert "Traceback" not in caplog.text
    assert all("\n" not in r.getMessage() for r in caplog.records)


def test_a_bad_operator_beside_a_good_one_is_recorded_and_the_good_one_runs(tmp_path):
    path = tmp_path / "ops.json"
    path.write_text(json.dumps({"torch.mul": {"config": []}, "torch.add": GOOD_OP}))
    code, _, res = run_ops(tmp_path, path)
    assert code == 0 and res["status"] == "ok" and len(res["measurements"]) == 1
    assert [e["error"] for e in res["extra"]["errors"]] == [
        "torch.mul: config: an empty list, no inputs to run"]


def test_several_failures_are_counted_after_the_file(tmp_path):
    path = tmp_path / "ops.json"
    path.write_text(json.dumps({"torch.mul": {"config": []}, "torch.add": 1}))
    code, _, res = run_ops(tmp_path, path)
    assert code == 1 and res["error"] == (
        f"config {path}: 2 errors, none measured; first: torch.mul: config: an empty list, "
        "no inputs to run")


def test_a_byte_order_mark_is_allowed(tmp_path):
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"torch.add": GOOD_OP}).encode())
    code, _, res = run_ops(tmp_path, path)
    assert code == 0 and res["status"] == "ok"


def test_a_file_larger_than_an_op_config_is_not_read_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(configfile, "MAX_BYTES", 1024 * 1024)
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"torch.add": {**GOOD_OP, "pad": "x" * 1024 * 1024}}))
    code, _, res = run_ops(tmp_path, path)
    assert code == 1 and res["error"] == f"config {path}: larger than 1 MiB, not an op config"


def test_the_deepest_shipped_configs_are_well_within_the_nesting_limit():
    root = Path(__file__).resolve().parents[1]
    for path in [*root.glob("config/ops/*.json"), *root.glob("tests/data/param-configs/*.json")]:
        assert configfile.depth(configfile.load(path)) <= configfile.MAX_DEPTH // 4, path


# Ranges that multiply past what can be listed ---------------------------------------------


def ranged_shape(*dims):
    return {"type": "tensor", "dtype": "float", "shape": [list(d) for d in dims],
            "__range__": ["shape"]}


def test_a_range_that_expands_past_the_limit_is_an_error_not_a_hang(tmp_path):
    # 10^10 shapes: listing them would take all memory long before running any
    config = {"torch.add": {"input_iterator": "RangeConfigIterator", "config": [{"input": [
        {"args": [ranged_shape((1, 100_000), (1, 100_000))]},
        {"args": [ranged_shape((1, 2)), ranged_shape((1, 2))]},
    ]}]}}
    path = tmp_path / "ops.json"
    path.write_text(json.dumps(config))
    code, lines, res = run_ops(tmp_path, path, "-i", "1", "-w", "0")
    (error,) = [line for line in lines if "error" in line]
    assert error["error"] == (
        "torch.add: config[0].input[0]: its __range__ fields make more than 100000 "
        "combinations, the most one list may run")
    assert error["id"] == "0|0|0_*"
    assert code == 0 and [m["name"] for m in res["measurements"]] == [
        "0|0|1_0", "0|0|1_1", "0|0|1_2", "0|0|1_3"]


def test_the_limit_counts_a_whole_list(monkeypatch):
    monkeypatch.setattr(iterators, "MAX_EXPANDED", 10)
    spec = {"args": [{"type": "int", "value": [1, 6], "__range__": ["value"]}]}
    config = {"input": [spec, spec]}
    items = list(iterators.RangeConfigIterator(config, "input", "cpu", "config[0]"))
    assert [i.id for i in items] == [f"0_{k}" for k in range(6)] + ["1_*"]
    assert items[-1].error == ("config[0].input[1]: its 6 __range__ combinations and the 6 "
                               "before it exceed the 10 one list may run")


@pytest.mark.parametrize("arg", [
    {"type": "int", "value": [0, 9, 3], "__range__": ["value"]},
    {"type": "str", "value": ["a", "b", "c"], "__range__": ["value"]},
    ranged_shape((1, 3), (2, 4, 2)),
    {"type": "tensor", "dtype": ["float", "double"], "shape": [[1, 2], 3],
     "__range__": ["dtype", "shape"]},
    {"type": "genericlist", "__range__": ["value"], "value": [
        {"type": "int", "value": [1, 2], "__range__": ["value"]},
        {"type": "bool", "value": [True, False], "__range__": ["value"]},
        {"type": "int", "value": 3}]},
    {"type": "genericlist", "value": [{"type": "int", "value": 3}]},
])
def test_counting_agrees_with_expanding(arg):
    spec = {"args": [arg, arg], "kwargs": {"k": arg}}
    assert iterators.count_combinations(spec) == len(list(iterators.expand_config(spec)))


# Standalone --------------------------------------------------------------------------------


@pytest.mark.parametrize("content,error", [
    (b"{}", "holds no operators (an empty JSON object)"),
    (b"\xff\xfe\x00garbage", "not UTF-8 text, so not JSON (byte 0xff at offset 0)"),
    (b'{"torch.add": 5}', 'torch.add: expected an object with a "config" list (and optional '
                          "iterators and data generators), got a number"),
])
def test_standalone_a_bad_file_is_one_line_naming_it_and_exit_1(tmp_path, content, error):
    path = tmp_path / "odd config.json"
    path.write_bytes(content)
    proc = subprocess.run([sys.executable, "-m", "dlbench.ops", "-c", str(path),
                           "-o", str(tmp_path / "out"), "-l", "WARNING"], capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert '__results.status__="failed"' in proc.stdout
    assert f"__results.status_msg__={json.dumps(f'config {path}: {error}')}" in proc.stdout
    assert error in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_an_op_config_whose_path_starts_with_a_dash_is_the_config_not_an_option(
        tmp_path, monkeypatch):
    # given as "-c <path>", a file named -ops.json failed every cell of its study (argparse:
    # "-c: expected one argument"); the cell passes it as --config=<path>
    from dlbench import kinds, study
    from dlbench.ops.cli import build_parser

    monkeypatch.chdir(tmp_path)
    Path("-ops.json").write_text(json.dumps({"torch.add": GOOD_OP}))
    (cell,) = study.expand_config({"studies": {"o": {"kind": "ops", "grid": {
        "op_config": "-ops.json", "device": "cpu"}}}})
    argv = kinds.get("ops").command(cell.params, Path("x.json"), "python", None)
    start = argv.index("dlbench.ops") + 1
    assert build_parser().parse_args(argv[start:]).config == "-ops.json"


def test_a_result_named_as_params_json_lines_file_is_refused_before_anything_runs(tmp_path):
    """-o P writes P.json (PARAM's records): --output P.json wrote the result over them."""
    from dlbench.ops.cli import main

    with pytest.raises(SystemExit) as info:
        main(["-c", "config/ops/cpu_demo.json", "-o", str(tmp_path / "p"),
              "--output", str(tmp_path / "p.json")])
    assert info.value.code == 2 and not (tmp_path / "p.json").exists()
