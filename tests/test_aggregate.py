
import json

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


def test_cli_turns_a_bad_result_file_into_a_failed_row_naming_it(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    rc = aggregate.main([str(bad), "--parquet", str(tmp_path / "x.parquet")])
    assert rc == 0
    (row,) = pq.read_table(tmp_path / "x.parquet").to_pylist()
    assert row["status"] == "failed" and row["source"] == str(bad)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{bad}: not a dlbench result" in err
    assert not bad.exists() and len(list((tmp_path / "invalid").iterdir())) == 1


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
