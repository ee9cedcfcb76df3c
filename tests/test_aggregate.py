
import datetime
import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from dlbench import aggregate
from dlbench import result as R


def write_cell(path, status="ok", n_measurements=1):
    res = R.new_result(kind="model", study="s", cell_id=path.stem,
                       cell={"framework": "pytorch", "model": "resnet18", "batch_size": 8,
                             "precision": "float32", "phase": "training", "device": "cpu",
                             "num_gpus": 1, "model_opts": {}})
    res["environment"] = {"hostname": "h", "gpu_models": ["H200", "H200"]}
    for i in range(n_measurements):
        res["measurements"].append(R.measurement(
            name=f"m{i}", pass_="training", times_s=[0.1, 0.2], items_per_iteration=8,
            extra={"phi": 1234}))
    R.finish(res, status, None if status == "ok" else "RuntimeError: boom")
    R.write(res, path)
    return path


def test_rows_per_measurement_and_failed_cells_keep_a_row(tmp_path):
    files = [write_cell(tmp_path / "a.json"), write_cell(tmp_path / "b.json", n_measurements=2),
             write_cell(tmp_path / "c.json", status="failed", n_measurements=0)]
    parquet, csv = tmp_path / "out.parquet", tmp_path / "out.csv"
    aggregate.write(files, parquet, csv)
    table = pq.read_table(parquet)
    assert table.schema.equals(aggregate.SCHEMA)
    rows = table.to_pylist()
    assert len(rows) == 4
    failed = [r for r in rows if r["status"] == "failed"]
    assert len(failed) == 1 and failed[0]["throughput"] is None
    assert failed[0]["error"] == "RuntimeError: boom"
    ok = [r for r in rows if r["cell_id"] == "a"][0]
    assert abs(ok["throughput"] - 8 / 0.15) < 1e-9 and ok["phi"] == 1234
    assert ok["times_s"] == [0.1, 0.2] and ok["gpu_model"] == "H200"
    assert json.loads(ok["environment"])["hostname"] == "h"
    assert csv.read_text().count("\n") == 5  # header + 4 rows


def test_times_are_utc_timestamps_and_fields_carry_unit_and_description(tmp_path):
    """started_at/finished_at were ISO text, to be parsed by every reader before a filter
    or a subtraction; each field names its unit and meaning (docs/columns.md)."""
    a = write_cell(tmp_path / "a.json")
    res = json.loads(a.read_text())
    res["started_at"] = "2026-11-29T10:49:37.158+01:00"  # another offset: the same instant
    res["finished_at"] = "2026-11-29T09:49:38"  # none: UTC, the records' clock
    a.write_text(json.dumps(res))
    aggregate.write([a], tmp_path / "t.parquet", tmp_path / "t.csv")
    table = pq.read_table(tmp_path / "t.parquet")
    (row,) = table.to_pylist()
    utc = datetime.timezone.utc
    assert row["started_at"] == datetime.datetime(2026, 11, 29, 9, 49, 37, 158000, tzinfo=utc)
    assert row["finished_at"] == datetime.datetime(2026, 11, 29, 9, 49, 38, tzinfo=utc)
    frame = pd.read_csv(tmp_path / "t.csv", parse_dates=["started_at"])
    assert frame.started_at[0] == pd.Timestamp("2026-11-29T09:49:37.158Z")
    gbps = table.schema.field("gbps").metadata
    assert gbps[b"unit"] == b"GB/s" and b"per second" in gbps[b"description"]
    res["started_at"] = "yesterday"
    a.write_text(json.dumps(res))
    (bad,) = aggregate.build_table([a]).to_pylist()
    assert bad["status"] == "failed"
    assert "field started_at: not an ISO 8601 time: 'yesterday'" in bad["error"]


def test_a_table_written_with_text_times_is_read_with_timestamps(tmp_path):
    """A table of an earlier release held its times as ISO 8601 text: the report and
    dlbench compare read it (aggregate.read_table) as a table of this one."""
    new = aggregate.build_table([write_cell(tmp_path / "a.json")])
    index = new.schema.get_field_index("started_at")
    text = [new.column(index)[0].as_py().isoformat(timespec="milliseconds")]
    old = new.set_column(index, "started_at", pa.array(text, type=pa.string()))
    pq.write_table(old, tmp_path / "old.parquet")
    read = aggregate.read_table(tmp_path / "old.parquet", ["status"])
    assert read.schema.field("started_at").type == aggregate.TIMESTAMP
    assert read.column("started_at").to_pylist() == new.column("started_at").to_pylist()
    merged = pa.concat_tables([read, new], promote_options="default")
    assert merged.num_rows == 2


def test_cli_turns_a_bad_result_file_into_a_failed_row_naming_it(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    rc = aggregate.main([str(bad), "--parquet", str(tmp_path / "x.parquet")])
    assert rc == 0
    (row,) = pq.read_table(tmp_path / "x.parquet").to_pylist()
    assert row["status"] == "failed" and row["source"] == str(bad)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{bad}: not a dlbench result" in err
    assert bad.exists()  # by hand: the user's file stays (only the workflow moves it)


def test_a_result_older_than_an_axis_reads_at_its_default_where_its_framework_has_it():
    """A model cell recorded before num_nodes, compile and memory_format existed is a
    one-node eager contiguous cell (MXNet has no compile modes: none); a collective cell
    from before num_nodes, validate and blocking: one node, not validated, blocking. A value
    recorded stays."""
    def row(kind, cell):
        res = R.new_result(kind=kind, study="s", cell_id="x", cell=cell)
        return aggregate.rows_of(R.finish(res, "failed", "x"), "x.json")[0]

    old = {"framework": "pytorch", "model": "resnet18", "batch_size": 8, "device": "cpu",
           "precision": "float32", "phase": "training", "num_gpus": 1, "model_opts": {}}
    got = row("model", old)
    assert (got["num_nodes"], got["compile"], got["memory_format"]) == (1, "eager", "contiguous")
    got = row("loader", {**old, "framework": "mxnet"})
    assert (got["num_nodes"], got["compile"], got["memory_format"]) == (1, None, None)
    assert row("model", {**old, "num_nodes": 4})["num_nodes"] == 4
    comms = {"framework": "pytorch", "collective": "all_reduce", "data_type": "float32",
             "num_gpus": 2, "device": "cpu"}
    got = row("comms", comms)
    # Blocking (each collective waited for), so no window of collectives issued at once.
    assert (got["num_nodes"], got["validate"], got["blocking"], got["window"]) == (
        1, False, True, None)
    assert row("comms", {**comms, "blocking": False, "window": 8})["window"] == 8
    assert row("op", {"framework": "pytorch", "op_config": "x.json"})["num_nodes"] is None


def op_result(path, errors):
    """An operator cell that measured torch.add and recorded ``errors`` for other inputs."""
    res = R.new_result(kind="op", study="s", cell_id=path.stem,
                       cell={"framework": "pytorch", "op_config": "mixed.json", "device": "cpu"})
    res["measurements"].append(R.measurement(
        name="0|0|0", op_name="torch.add", pass_="forward", times_s=[0.1, 0.2],
        items_per_iteration=1))
    res["extra"] = {"errors": errors}
    R.finish(res, "ok")
    R.write(res, path)
    return path


def test_failed_inputs_of_an_ok_operator_cell_are_rows_of_their_own(tmp_path):
    errors = [{"op_name": "torch.mm", "id": "0|0|1", "error": "torch.mm: shapes", "oom": False},
              {"op_name": "torch.bmm", "id": "0|0|0", "error": "torch.bmm: CUDA out of memory",
               "oom": True},
              {"op_name": "torch.nope", "id": None, "error": "torch.nope: unknown operator",
               "oom": False}]
    table = aggregate.write([op_result(tmp_path / "c.json", errors)], tmp_path / "t.parquet")
    rows = table.to_pylist()
    got = [(r["status"], r["op_name"], r["name"], r["error"]) for r in rows]
    # The measured input first: a per-cell view keeping each cell's last row sees a failure.
    assert got == [("ok", "torch.add", "0|0|0", None),
                   ("failed", "torch.mm", "0|0|1", "torch.mm: shapes"),
                   ("oom", "torch.bmm", "0|0|0", "torch.bmm: CUDA out of memory"),
                   ("failed", "torch.nope", None, "torch.nope: unknown operator")]
    assert {r["cell_id"] for r in rows} == {"c"} and rows[1]["throughput"] is None
    assert rows[1]["op_config"] == "mixed.json" and rows[1]["repeats"] is None
    assert json.loads(rows[1]["extra"])["failed_input"]["id"] == "0|0|1"
    # A cell that measured nothing is one failed row: its own error counts the inputs.
    res = R.read(tmp_path / "c.json")
    res["measurements"] = []
    R.finish(res, "failed", "config mixed.json: 3 errors, none measured; first: ...")
    (row,) = aggregate.rows_of(res, "c.json")
    assert (row["status"], row.get("op_name"), row["error"]) == ("failed", None, res["error"])


def test_by_hand_files_are_never_moved_and_each_bad_one_is_a_failed_row_in_one_line(
        tmp_path, capsys):
    """PARAM's JSON-lines output (also .json) and a missing file: a failed row naming the
    file and one line each; the user's files stay where they are."""
    good = write_cell(tmp_path / "good.json")
    param = tmp_path / "benchmark_result.json"
    param.write_text('{"run_options": {}}\n{"op_name": "torch.add"}\n')
    missing = tmp_path / "missing.json"
    rc = aggregate.main([str(good), str(param), str(missing),
                         "--parquet", str(tmp_path / "t.parquet")])
    assert rc == 0
    rows = {r["source"]: r for r in pq.read_table(tmp_path / "t.parquet").to_pylist()}
    assert rows[str(good)]["status"] == "ok"
    assert rows[str(param)]["status"] == rows[str(missing)]["status"] == "failed"
    assert param.exists() and not (tmp_path / "invalid").exists()
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        f"dlbench.aggregate: invalid result file {param}: not a JSON result file "
        "(Extra data at line 2, column 1)",
        f"dlbench.aggregate: invalid result file {missing}: cannot be read "
        "(No such file or directory)"]


def test_integer_columns_stay_integers_in_the_csv_when_cell_kinds_mix(tmp_path):
    """An operator cell has no batch_size: the column holds a null, which must not turn
    the model cell's 8 into 8.0."""
    files = [write_cell(tmp_path / "m.json"), op_result(tmp_path / "o.json", [])]
    csv = tmp_path / "t.csv"
    aggregate.write(files, tmp_path / "t.parquet", csv)
    rows = pd.read_csv(csv, dtype=str, keep_default_na=False).set_index("cell_id")
    assert rows.loc["m", "batch_size"] == "8" and rows.loc["o", "batch_size"] == ""
    assert rows.loc["m", "iterations"] == "2" and rows.loc["m", "repeat"] == "0"


def test_energy_sources_are_a_column_sorted_and_joined_null_where_nothing_was_counted(
        tmp_path):
    """What a cell's energy counts is in the table: the monitor's list sorted and joined
    by "+", null where nothing was counted or where the result predates the key; a value
    of another shape is a failed row naming the field."""
    def with_monitor(name, **monitor):
        path = write_cell(tmp_path / f"{name}.json")
        res = R.read(path)
        res["extra"]["monitor"] = {"energy_j": 10.0 if monitor.get("energy_sources") else None,
                                   **monitor}
        R.write(res, path)
        return path

    files = [with_monitor("both", energy_sources=["host:rapl", "gpu:nvml_total_energy"]),
             with_monitor("gpus", energy_sources=["gpu:nvml_total_energy"]),
             with_monitor("none", energy_sources=[]),
             with_monitor("older"),  # a result from before energy_sources
             with_monitor("bad", energy_sources="host:rapl")]
    aggregate.write(files, tmp_path / "t.parquet", move_invalid=False)
    table = pq.read_table(tmp_path / "t.parquet")
    assert table.schema.field("energy_sources").type == "string"
    rows = {Path(r["source"]).stem: r for r in table.to_pylist()}
    assert rows["both"]["energy_sources"] == "gpu:nvml_total_energy+host:rapl"
    assert rows["gpus"]["energy_sources"] == "gpu:nvml_total_energy"
    assert rows["none"]["energy_sources"] is None and rows["older"]["energy_sources"] is None
    assert rows["bad"]["status"] == "failed"
    assert "field extra.monitor.energy_sources: expected a list" in rows["bad"]["error"]
