"""The results table's column dictionary (dlbench.table_columns) against the table."""

from __future__ import annotations

from pathlib import Path

from dlbench import aggregate, axes, table_columns

DOC = Path(__file__).resolve().parents[1] / "docs" / "columns.md"


def undescribed() -> list[str]:
    """The table's columns without a unit-and-description entry or with an empty one."""
    missing = []
    for name in aggregate.SCHEMA.names:
        try:
            _, description = table_columns.describe(name)
        except KeyError:
            missing.append(name)
            continue
        if not description.strip():
            missing.append(name)
    return missing


def test_every_column_is_described():
    missing = undescribed()
    assert not missing, (f"columns without a description in dlbench.table_columns: "
                         f"{', '.join(missing)}")


def test_an_entry_taken_away_is_named(monkeypatch):
    # A new column without an entry must fail the test above by name.
    monkeypatch.delitem(table_columns.COLUMNS, "gpu_driver")
    assert undescribed() == ["gpu_driver"]


def test_no_entry_for_a_column_the_table_lacks():
    names = set(aggregate.SCHEMA.names)
    axis_columns = table_columns.axis_columns()
    stale = sorted(set(table_columns.COLUMNS) - names)
    assert not stale, f"COLUMNS describes columns the table has not: {', '.join(stale)}"
    # An axis column is described by the axis table, not twice.
    doubled = sorted(set(table_columns.COLUMNS) & axis_columns)
    assert not doubled, f"COLUMNS describes axis columns: {', '.join(doubled)}"
    for mapping in ("AXES", "AXIS_UNITS"):
        stale = sorted(set(getattr(table_columns, mapping)) - axis_columns)
        assert not stale, f"{mapping} names no axis column: {', '.join(stale)}"
    stale = sorted(set(table_columns.SECTIONS) - names)
    assert not stale, f"SECTIONS starts at columns the table has not: {', '.join(stale)}"


def test_the_first_column_opens_a_section():
    assert aggregate.SCHEMA.names[0] in table_columns.SECTIONS


def test_axis_descriptions_come_from_the_axis_table():
    unit, description = table_columns.describe("batch_size")
    assert unit == "samples"
    assert description.startswith(axes.get("batch_size").help)
    assert "[model, loader, llm_inference rows]" in description


def test_field_metadata():
    assert table_columns.field_metadata("gbps") == {
        b"unit": b"GB/s", b"description": table_columns.COLUMNS["gbps"][1].encode()}
    assert table_columns.field_metadata("no_such_column") == {}


def test_types_are_written_plainly():
    import pyarrow as pa

    assert table_columns.type_name(pa.list_(pa.float64())) == "list<double>"
    assert table_columns.type_name(pa.int64()) == "int64"


def test_the_doc_is_the_generators_output():
    assert DOC.read_text() == table_columns.markdown(), (
        f"docs/columns.md is out of date: run `{table_columns.REGENERATE}`")
