from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from dlbench import peaks

# Names as torch.cuda.get_device_name() returns them on each device (ROCm: marketing name).
DEVICE_NAMES = {
    "NVIDIA A100-SXM4-40GB": "NVIDIA A100 40GB SXM4",
    "NVIDIA A100-SXM4-80GB": "NVIDIA A100 80GB SXM4",
    "NVIDIA A100-PCIE-40GB": "NVIDIA A100 40GB PCIe",
    "NVIDIA A100 80GB PCIe": "NVIDIA A100 80GB PCIe",
    "NVIDIA H100 80GB HBM3": "NVIDIA H100 SXM5 80GB",
    "NVIDIA H100 PCIe": "NVIDIA H100 PCIe 80GB",
    "NVIDIA H100 NVL": "NVIDIA H100 NVL",
    "NVIDIA H200": "NVIDIA H200 SXM 141GB",
    "NVIDIA H200 NVL": "NVIDIA H200 NVL",
    "NVIDIA B200": "NVIDIA B200",
    "NVIDIA L40S": "NVIDIA L40S",
    "AMD Instinct MI250X": "AMD Instinct MI250X",
    "AMD Instinct MI250X / MI250": "AMD Instinct MI250X",
    "AMD Instinct MI300X": "AMD Instinct MI300X",
}

# Devices without a row, several of them one character away from a device with one.
UNKNOWN_NAMES = ["NVIDIA GeForce RTX 4090", "Tesla V100-SXM2-16GB", "", None, "cpu",
                 "NVIDIA GH200 480GB", "NVIDIA GB200", "NVIDIA L40", "NVIDIA A100X",
                 "NVIDIA A800 80GB PCIe", "NVIDIA A100", "AMD Instinct MI300A",
                 "AMD Instinct MI308X", "AMD Instinct MI250",
                 # a MIG instance has a share of its GPU: the GPU's peaks are not its own
                 "NVIDIA A100-SXM4-80GB MIG 1g.10gb", "NVIDIA H100 80GB HBM3 MIG 3g.40gb"]


def gpu_model(names):
    # The aggregate table's gpu_model column: a cell's GPU names, distinct and sorted.
    return ", ".join(sorted(set(names)))


@pytest.mark.parametrize(("name", "model"), DEVICE_NAMES.items())
def test_device_names_map_to_their_row(name, model):
    assert peaks.lookup(name).model == model
    assert peaks.lookup(name.upper()).model == model  # matching ignores case


@pytest.mark.parametrize("name", DEVICE_NAMES)
def test_exactly_one_row_matches_each_device_name(name):
    # Holds whatever the order of the file: no row relies on an earlier one to shadow it.
    matching = [entry.model for entry, patterns in peaks._entries(peaks.TABLE_PATH)
                if any(p.search(name) for p in patterns)]
    assert matching == [DEVICE_NAMES[name]]


@pytest.mark.parametrize("name", UNKNOWN_NAMES)
def test_unknown_devices_get_none(name):
    assert peaks.lookup(name) is None
    assert peaks.peak_tflops(name, "float32") is None
    assert peaks.peak_bandwidth_gbps(name) is None


def test_gpu_model_column_of_one_model_is_that_model():
    value = gpu_model(["NVIDIA H100 80GB HBM3"] * 4)
    assert peaks.lookup(value).model == "NVIDIA H100 SXM5 80GB"
    # Two names that ROCm gives the same device are still one model.
    value = gpu_model(["AMD Instinct MI250X", "AMD Instinct MI250X / MI250"])
    assert "," in value and peaks.lookup(value).model == "AMD Instinct MI250X"


@pytest.mark.parametrize("names", [
    ["NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe"],
    ["NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-80GB"],
    ["NVIDIA H200", "NVIDIA H200 NVL"],
    ["NVIDIA L40S", "NVIDIA GeForce RTX 4090"],
])
def test_gpu_model_column_of_mixed_models_is_none(names):
    assert peaks.lookup(gpu_model(names)) is None
    assert peaks.peak_tflops(gpu_model(names), "bfloat16") is None


@pytest.mark.parametrize(("name", "precision", "expected"), [
    ("NVIDIA H100 80GB HBM3", "bfloat16", 989.4),
    ("NVIDIA H100 80GB HBM3", "float64", 67),
    ("NVIDIA H100 PCIe", "tf32", 378),
    ("NVIDIA A100 80GB PCIe", "float32", 19.5),
    ("NVIDIA A100-SXM4-40GB", "int8", 624),
    ("NVIDIA H200", "float8", 1978.9),
    ("NVIDIA L40S", "float16", 362.05),
    ("AMD Instinct MI300X", "float8", 2614.9),
    ("AMD Instinct MI250X", "float64", 47.85),  # one GCD, a device of ROCm's
    ("AMD Instinct MI250X", "tf32", None),
    ("NVIDIA L40S", "float64", None),
    ("NVIDIA A100-SXM4-80GB", "float8", None),
    ("NVIDIA H100 80GB HBM3", "float4", None),
    ("NVIDIA H100 80GB HBM3", "fp16", None),  # a table key is not a dlbench precision
])
def test_peak_tflops(name, precision, expected):
    assert peaks.peak_tflops(name, precision) == expected


@pytest.mark.parametrize(("name", "expected"), [
    ("NVIDIA A100-PCIE-40GB", 1555), ("NVIDIA A100 80GB PCIe", 1935),
    ("NVIDIA A100-SXM4-80GB", 2039), ("NVIDIA H100 80GB HBM3", 3350),
    ("NVIDIA H100 PCIe", 2000), ("NVIDIA H200", 4800), ("AMD Instinct MI250X", 1638.4),
    ("AMD Instinct MI300X", 5300), ("NVIDIA L40S", 864),
])
def test_peak_bandwidth(name, expected):
    assert peaks.peak_bandwidth_gbps(name) == expected


def test_precision_keys_cover_the_table_keys():
    assert sorted(peaks.PRECISION_KEYS.values()) == sorted(peaks.TFLOPS_KEYS)


def test_every_row_is_sourced_positive_and_consistent():
    rows = peaks.table()
    assert len({row.model for row in rows}) == len(rows) >= 13
    for row in rows:
        assert row.source.startswith("https://"), row.model
        assert row.vendor in ("nvidia", "amd") and row.notes, row.model
        assert set(row.tflops) == set(peaks.TFLOPS_KEYS), row.model
        rates = [*row.tflops.values(), row.memory_bandwidth_gbps, row.memory_gb]
        assert all(rate is None or rate > 0 for rate in rates), row.model
        assert row.memory_bandwidth_gbps and row.memory_gb, row.model
        t = row.tflops
        # Matrix units double their rate each time the operand width halves; the datasheets
        # round, hence the tolerance (L40S: 183 vs 362.05, B200: 2.2 PF for 2.25).
        for wide, narrow in (("tf32", "fp16"), ("fp16", "fp8")):
            if t[wide] is not None and t[narrow] is not None:
                assert t[narrow] == pytest.approx(2 * t[wide], rel=0.025), (row.model, narrow)
        for low, high in (("tf32", "fp16"), ("fp32", "fp16"), ("fp64", "fp32")):
            if t[low] is not None and t[high] is not None:
                assert t[high] >= t[low], (row.model, high)
        assert t["fp16"] == t["bf16"], row.model


def test_table_is_loaded_once():
    assert peaks.table()[0] is peaks.table()[0]


def test_the_module_imports_no_framework():
    code = ("import sys, dlbench.peaks as p; p.table(); "
            "print(sorted({'torch', 'mxnet', 'tensorflow', 'jax'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


GOOD_ENTRY = """\
- model: Good One
  vendor: nvidia
  match: ['\\bGood\\b']
  tflops: {fp64: 1, fp32: 2, tf32: 4, fp16: 8, bf16: 8, fp8: null, int8: 16}
  memory_bandwidth_gbps: 100
  memory_gb: 10
  source: https://example.com/good
  notes: fine
"""


def write_table(tmp_path, second_entry):
    path = tmp_path / "peaks.yaml"
    path.write_text(GOOD_ENTRY + textwrap.dedent(second_entry))
    return path


def test_a_custom_table_loads(tmp_path):
    path = write_table(tmp_path, GOOD_ENTRY.replace("Good One", "Good Two"))
    rows = peaks.table(path)
    assert [row.model for row in rows] == ["Good One", "Good Two"]
    assert rows[0].tflops["fp16"] == 8.0 and rows[0].tflops["fp8"] is None


@pytest.mark.parametrize(("change", "field"), [
    (("  source: https://example.com/good\n", ""), "source"),
    (("https://example.com/good", "http://example.com/good"), "source"),
    (("fp16: 8,", "fp16: -8,"), "tflops.fp16"),
    (("int8: 16", "int8: yes"), "tflops.int8"),
    (("int8: 16", "int8: .nan"), "tflops.int8"),
    (("fp8: null, ", ""), "tflops"),
    (("memory_gb: 10", "memory_gb: 0"), "memory_gb"),
    (("memory_bandwidth_gbps: 100", "memory_bandwidth_gbps: fast"), "memory_bandwidth_gbps"),
    (("'\\bGood\\b'", "'Good('"), "match"),
    (("match: ['\\bGood\\b']", "match: []"), "match"),
    (("vendor: nvidia", "vendor: intel"), "vendor"),
    (("notes: fine", "notes: fine\n  note: typo"), "note"),
])
def test_a_malformed_table_names_file_entry_and_field(tmp_path, change, field):
    old, new = change
    second = GOOD_ENTRY.replace("Good One", "Good Two")
    assert old in second
    path = write_table(tmp_path, second.replace(old, new))
    with pytest.raises(peaks.PeakTableError) as caught:
        peaks.table(path)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: entry 2 (Good Two): field '{field}': "), message


def test_a_duplicate_model_is_refused(tmp_path):
    with pytest.raises(peaks.PeakTableError, match=r"entry 2 \(Good One\): field 'model'"):
        peaks.table(write_table(tmp_path, GOOD_ENTRY))


def test_an_unreadable_table_names_the_file(tmp_path):
    path = tmp_path / "peaks.yaml"
    path.write_text("- model: [unclosed\n")
    with pytest.raises(peaks.PeakTableError, match="peaks.yaml") as caught:
        peaks.table(path)
    assert "\n" not in str(caught.value)
    with pytest.raises(peaks.PeakTableError, match="missing.yaml"):
        peaks.table(tmp_path / "missing.yaml")


def test_a_cells_gpu_is_the_one_it_ran_on_not_the_machines_list():
    """On a node of two GPU models the table's gpu_model is the cell's own device (its
    runner's device_name), whose peaks its efficiency is judged by; a cell whose runner
    names none has the machine's models, which name no one device."""
    from dlbench import aggregate

    env = {"gpu_models": ["NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"],
           "device_name": "NVIDIA H100 80GB HBM3"}
    assert aggregate.gpu_model(env, {"device": "gpu"}) == "NVIDIA H100 80GB HBM3"
    assert peaks.lookup(aggregate.gpu_model(env, {"device": "gpu"})).model == \
        "NVIDIA H100 SXM5 80GB"
    machine = aggregate.gpu_model({**env, "device_name": None}, {"device": "gpu"})
    assert machine == "NVIDIA A100-SXM4-80GB, NVIDIA H100 80GB HBM3"
    assert peaks.lookup(machine) is None
    mig = {**env, "device_name": "NVIDIA H100 80GB HBM3 MIG 1g.10gb"}
    assert peaks.lookup(aggregate.gpu_model(mig, {"device": "gpu"})) is None
