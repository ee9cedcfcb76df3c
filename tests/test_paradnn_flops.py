"""FLOPs of ParaDnn's recurrent cells: the fused recurrent kernels counted as the matrix
products they are made of (dlbench.flop_counter), and a count that misses a kernel of
matrix products reported as missing, not as a figure."""

from __future__ import annotations

import itertools
import json

import pytest
import torch
from torch import nn

from dlbench import aggregate, flop_counter, models
from dlbench import result as R
from dlbench.pytorch import precision, runner, steps, zoo
from dlbench.report import data, model_charts, paradnn_charts

GATES = {"rnn": 1, "gru": 3, "lstm": 4}
# Small but with every dimension distinct, so that a product counted with the wrong size
# cannot land on the right total.
RNN_OPTS = {"layers": 3, "max_length": 7, "vocab_size": 50, "embedding_size": 12}
BATCH = 2


def rnn_flops_per_sample(opts: dict, cell: str, training: bool) -> int:
    """Per layer, the input and the recurrent products, gates·E² weights each, over every
    token; the output layer over every token. Training: three times the forward (the
    gradients of the products' inputs and of their weights), less the initial hidden
    state's gradient, 2·gates·E² a layer: it is zeros, which need none."""
    length, layers, width = opts["max_length"], opts["layers"], opts["embedding_size"]
    recurrent = layers * GATES[cell] * width * width
    forward = 2 * length * (2 * recurrent + width * opts["vocab_size"])
    return 3 * forward - 2 * recurrent if training else forward


def counted(cell: str, training: bool) -> tuple[float | None, list[str]]:
    """The runner's count of one step of a ParaDnn RNN on the CPU (oneDNN on, as a cell runs)."""
    opts = models.get("paradnn_rnn").opts({**RNN_OPTS, "cell": cell})
    built = zoo.build("paradnn_rnn", opts)
    mode = precision.setup("float32", "cpu")
    step = (steps.training_step(built.module, built, mode, "cpu") if training
            else steps.inference_step(built.module, mode, "cpu"))
    ids = torch.randint(0, opts["vocab_size"], (BATCH, opts["max_length"]))
    return runner.count_flops(step, (ids, ids))


@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("cell", sorted(GATES))
def test_paradnn_rnn_counts_every_recurrent_layer_on_the_cpu(cell, training):
    """lstm, gru and rnn: gates 4, 3 and 1 times the products of an Elman layer, all counted
    (an LSTM, oneDNN's fused kernel on a CPU, was counted as its output layer only)."""
    opts = {**RNN_OPTS, "cell": cell}
    flops, uncounted = counted(cell, training)
    assert flops == BATCH * rnn_flops_per_sample(opts, cell, training)
    assert uncounted == []


def lstm_case(bidirectional: bool, input_grad: bool, hx_grad: bool, frozen: bool):
    torch.manual_seed(0)
    layer = nn.LSTM(6, 5, num_layers=2, batch_first=True, bidirectional=bidirectional)
    layer.requires_grad_(not frozen)
    states = 2 * (2 if bidirectional else 1)
    x = torch.randn(3, 4, 6, requires_grad=input_grad)
    hx = (torch.zeros(states, 3, 5, requires_grad=hx_grad), torch.zeros(states, 3, 5))
    return layer, x, hx


def count(layer: nn.Module, x: torch.Tensor, hx, *, fused: bool, training: bool):
    with torch.backends.mkldnn.flags(enabled=fused), flop_counter.counter() as counter:
        out = layer(x, hx)[0]
        if training:
            out.sum().backward()
    return counter


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize(("input_grad", "hx_grad", "frozen"), [
    case for case in itertools.product([True, False], repeat=3) if case != (False, False, True)])
def test_the_fused_cpu_lstm_counts_what_its_matrix_products_count(bidirectional, input_grad,
                                                                   hx_grad, frozen):
    """oneDNN's LSTM kernel (forward and backward) against the same LSTM run as matrix
    products (oneDNN off), for every gradient autograd may skip: the input's, the initial
    state's, the weights'."""
    layer, x, hx = lstm_case(bidirectional, input_grad, hx_grad, frozen)
    for training in (False, True):
        fused = count(layer, x, hx, fused=True, training=training)
        assert torch.ops.aten.mkldnn_rnn_layer in fused.get_flop_counts()["Global"]
        products = count(layer, x, hx, fused=False, training=training)
        assert torch.ops.aten.mkldnn_rnn_layer not in products.get_flop_counts()["Global"]
        assert fused.get_total_flops() == products.get_total_flops() > 0


# cuDNN's mode numbers (cudnnRNNMode_t).
CUDNN_MODES = {nn.RNN: 1, nn.LSTM: 2, nn.GRU: 3}
CUDNN_LAYERS = [(nn.RNN, {}), (nn.GRU, {}), (nn.LSTM, {}), (nn.GRU, {"bidirectional": True}),
                (nn.LSTM, {"proj_size": 3}), (nn.LSTM, {"bias": False, "bidirectional": True})]


def test_the_cudnn_formulas_read_the_arguments_their_schemas_name():
    """The backward formulas read arguments by position: the schemas still put them there."""
    names = [a.name for a in torch.ops.aten._cudnn_rnn_backward.default._schema.arguments]
    assert (names[:5], names[4 + 9], names[-1]) == (
        ["input", "weight", "weight_stride0", "weight_buf", "hx"], "num_layers", "output_mask")
    names = [a.name for a in torch.ops.aten.mkldnn_rnn_layer_backward.default._schema.arguments]
    assert names[:6] == ["input", "weight1", "weight2", "weight3", "weight4", "hx_"]


@pytest.mark.parametrize(("cls", "kwargs"), CUDNN_LAYERS,
                         ids=[f"{c.__name__}{k}" for c, k in CUDNN_LAYERS])
def test_cudnn_rnn_formulas_on_shapes_without_a_gpu(cls, kwargs):
    """No GPU is exercised: cuDNN's forward operator runs on meta tensors (shapes only) and
    its backward formula is given the shapes it would be called with. Both count what the
    same layer counts as matrix products on the CPU, for each output mask autograd may pass
    (input, hx, cx, weights)."""
    torch.manual_seed(0)
    layer = cls(6, 5, num_layers=2, batch_first=True, **kwargs)
    weights = layer._flat_weights
    directions = 2 if layer.bidirectional else 1
    stride0 = len(weights) // (2 * directions)
    out_size = layer.proj_size or 5
    x = torch.randn(3, 4, 6, requires_grad=True)
    h0 = torch.zeros(2 * directions, 3, out_size)
    c0 = torch.zeros(2 * directions, 3, 5) if cls is nn.LSTM else None

    def meta(t):
        return None if t is None else torch.empty_like(t, device="meta")

    args = (meta(x), [meta(w) for w in weights], stride0, None, meta(h0), meta(c0),
            CUDNN_MODES[cls], 5, layer.proj_size, 2, True, 0.0, True, layer.bidirectional,
            [], None)
    with flop_counter.counter() as fused:
        output = torch.ops.aten._cudnn_rnn(*args)[0]
    backward = fused.flop_registry[torch.ops.aten._cudnn_rnn_backward]
    for input_grad, hx_grad, weight_grad in itertools.product([True, False], repeat=3):
        if not (input_grad or hx_grad or weight_grad):
            continue
        layer.requires_grad_(weight_grad)
        x.requires_grad_(input_grad)
        h0.requires_grad_(hx_grad)
        state = (h0, c0) if cls is nn.LSTM else h0
        with torch.backends.mkldnn.flags(enabled=False), flop_counter.counter() as products:
            out = layer(x, state)[0]
            forward = products.get_total_flops()
            out.sum().backward()
        assert fused.get_total_flops() == forward > 0
        mask = [input_grad, hx_grad, False, weight_grad]
        assert backward(*args[:6], meta(output), meta(output), None, None, *args[6:],
                        torch.empty(0, device="meta"), mask,
                        out_val=None) == products.get_total_flops() - forward


def test_an_operator_of_matrix_products_without_a_formula_is_named_not_counted(monkeypatch):
    """Without oneDNN's formulas (as for a fused kernel the counter does not know), the
    LSTM's count misses its layers: the counter names the kernel, the runner records no
    FLOPs and says why in extra.flops_note rather than a TFLOP/s far too low."""
    known = flop_counter.formulas
    monkeypatch.setattr(flop_counter, "formulas", lambda: {
        op: f for op, f in known().items() if "mkldnn_rnn" not in str(op)})
    flops, uncounted = counted("lstm", training=True)
    assert uncounted == ["aten.mkldnn_rnn_layer", "aten.mkldnn_rnn_layer_backward"]
    assert 0 < flops < BATCH * rnn_flops_per_sample({**RNN_OPTS, "cell": "lstm"}, "lstm", True)


def test_the_runner_reports_no_flops_where_a_kernel_was_not_counted(monkeypatch, tmp_path):
    known = flop_counter.formulas
    monkeypatch.setattr(flop_counter, "formulas", lambda: {
        op: f for op, f in known().items() if "mkldnn_rnn" not in str(op)})
    out = tmp_path / "r.json"
    opts = json.dumps({**RNN_OPTS, "cell": "lstm"})
    assert runner.main(["--model=paradnn_rnn", "--device=cpu", f"--batch_size={BATCH}",
                        "--num_batches=1", "--num_warmup_batches=0", f"--model_opts={opts}",
                        "--monitor_interval_ms=0", f"--output={out}"]) == 0
    (m,) = R.read(out)["measurements"]
    assert m["flops_per_iteration"] is None and m["tflops"] is None
    assert m["extra"]["flops_note"].startswith(
        "not available: FlopCounterMode has no formula for aten.mkldnn_rnn_layer, "
        "aten.mkldnn_rnn_layer_backward")


@pytest.mark.parametrize(("name", "heavy"), [
    ("aten._cudnn_rnn", True), ("aten.miopen_rnn_backward", True), ("aten.quantized_lstm", True),
    ("aten.addbmm", True), ("aten._weight_int8pack_mm", True), ("aten.slow_conv3d_forward", True),
    ("aten._scaled_dot_product_flash_attention_for_cpu", True),
    ("aten._transformer_encoder_layer_fwd", True), ("aten._cudnn_rnn_flatten_weight", False),
    ("aten._thnn_fused_lstm_cell", False), ("aten.cummax", False), ("aten.lgamma", False),
    ("aten._convert_weight_to_int4pack", False), ("aten.embedding_dense_backward", False),
])
def test_operators_of_matrix_products_are_told_by_name(name, heavy):
    assert flop_counter.known_heavy(name) is heavy


def paradnn_result(model: str, parameters: int, phi: int | None, batch: int) -> dict:
    cell = {"framework": "pytorch", "model": model, "phase": "training",
            "precision": "float32", "batch_size": batch, "num_gpus": 1, "device": "gpu",
            "data": "synthetic"}
    res = R.new_result(kind="model", cell=cell, study="s", cell_id=f"{model}_{batch}")
    res["environment"] = {"hostname": "h", "framework": "pytorch"}
    extra = {} if phi is None else {"phi": phi}
    res["measurements"] = [R.measurement(
        name=model, pass_="training", times_s=[0.01, 0.011, 0.012], items_per_iteration=batch,
        parameters=parameters, flops_per_iteration=1e9 * batch, extra=extra)]
    return R.finish(res, "ok", None)


def test_paradnn_charts_size_models_by_parameters_and_keep_phi_for_fc_apart(tmp_path):
    """Φ is an FC model's weights without biases; the CNN's and RNN's counts include theirs.
    The charts' colour and axis are the parameter count of every model; Φ is its own
    column, empty where a model has none, never filled with another count."""
    results = [paradnn_result("paradnn_fc", 2_325_512, 2_322_432, b) for b in (8, 16)]
    results += [paradnn_result("paradnn_cnn", 4_000_000, None, b) for b in (8, 16)]
    results += [paradnn_result("paradnn_rnn", 250_000, None, b) for b in (8, 16)]
    paths = []
    for i, res in enumerate(results):
        paths.append(tmp_path / f"cell{i}.json")
        R.write(res, paths[-1])
    aggregate.write(paths, tmp_path / "b.parquet")
    frame = model_charts.model_frame(data.load(tmp_path / "b.parquet"), paradnn=True)
    by_model = frame.groupby("model").first()
    assert by_model["parameters"].to_dict() == {
        "paradnn_cnn": 4_000_000, "paradnn_fc": 2_325_512, "paradnn_rnn": 250_000}
    assert by_model.loc["paradnn_fc", "phi"] == 2_322_432
    assert by_model[["phi"]].drop("paradnn_fc").isna().all().all()
    by_batch, by_size = (paradnn_charts.by_batch_figure(frame),
                         paradnn_charts.by_size_figure(frame))
    colour = by_batch.chart.to_dict()["spec"]["layer"][0]["encoding"]["color"]
    axis = by_size.chart.to_dict()["spec"]["layer"][0]["encoding"]["x"]
    # points only over size: a line in size order zig-zagged between differently shaped
    # configurations (a CNN's dense layer against its convolutions)
    marks = [layer["mark"]["type"] for layer in by_size.chart.to_dict()["spec"]["layer"]]
    assert marks == ["point"]
    for encoding in (colour, axis):
        assert (encoding["field"], encoding["title"]) == ("parameters", "parameters")
    for figure in (by_batch, by_size):
        assert "Φ (parameters)" not in json.dumps(figure.chart.to_dict())
        columns = {c.field: c.title for c in figure.table.columns}
        assert (columns["parameters"], columns["phi"]) == ("parameters", "Φ (FC weights)")
