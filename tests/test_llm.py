"""Decoder-only language models: presets with published parameter counts, the PaLM FLOP
formula against PyTorch's FLOP counter, option checks, and a training cell through the
real runner (tokens/s, FLOPs by the formula for MFU)."""

from __future__ import annotations

import json

import pytest
import torch

from dlbench import models, study
from dlbench.models import llm as L

transformers = pytest.importorskip("transformers", reason="needs transformers")

from pytorch_cell import run_runner  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from dlbench.pytorch import zoo  # noqa: E402
from dlbench.pytorch.zoo import llm as torch_llm  # noqa: E402

TINY = ("llama_tiny", "gpt2_tiny", "mixtral_tiny")


@pytest.mark.parametrize("name", sorted(L.PUBLISHED))
def test_presets_have_the_published_parameter_counts(name):
    """Counted on the real transformers model, built on the meta device (no memory)."""
    opts = L.default_opts(name)
    assert L.parameter_count(opts) == L.PUBLISHED[name]
    with torch.device("meta"):
        model = torch_llm.make(name, opts)
    assert sum(p.numel() for p in model.parameters()) == L.PUBLISHED[name]


@pytest.mark.parametrize("name", TINY)
@pytest.mark.parametrize("training", [True, False])
def test_the_flop_formula_is_what_the_flop_counter_counts(name, training):
    """6·N·T + 12·L·H·Q·T² per sequence (training), a third in inference, equals
    FlopCounterMode's count of the real model, with attention in SDPA's math kernel and
    the experts as plain matmuls (the counter knows neither CPU flash attention nor
    grouped GEMMs: why MFU uses the formula)."""
    opts = {**L.default_opts(name), "sequence_length": 64}
    model = transformers.AutoModelForCausalLM.from_config(
        getattr(transformers, L.FAMILIES[L.family(name)])(**L.config_fields(opts)),
        attn_implementation="sdpa", experts_implementation="eager")
    ids = torch.randint(0, opts["vocab_size"], (3, 64))
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        logits = model(input_ids=ids, use_cache=False).logits
        if training:
            logits.float().sum().backward()
    assert counter.get_total_flops() == pytest.approx(3 * L.flops_per_sequence(opts, training),
                                                       rel=1e-9)


def test_the_mixture_of_experts_counts_the_routed_experts_only():
    opts = L.default_opts("mixtral_8x7b")
    active = L.matmul_weights(opts)
    # Two of eight experts: about 12.9 B of the 46.7 B weights multiply each token.
    assert 12.5e9 < active < 13.5e9
    dense = L.matmul_weights({**opts, "num_experts_per_tok": 8})
    assert dense > 3 * active


@pytest.mark.parametrize(("opts", "message"), [
    ({"sequence_length": 4096}, "sequence_length 4096 exceeds the model's context of 1024"),
    ({"num_attention_heads": 3}, "width (128) must be a multiple of the heads (3)"),
    ({"num_key_value_heads": 3}, "num_attention_heads (4) must be a multiple of "
                                 "num_key_value_heads (3)"),
    ({"activation_checkpointing": "yes"}, "activation_checkpointing must be true or false"),
    ({"hidden_size": 0}, "hidden_size must be a positive integer"),
    ({"parallel": "zero3"}, "parallel must be one of ddp, fsdp"),
    # transformers refuses these only as the model is built, in two lines the row cut
    ({"tie_word_embeddings": "yes"}, "tie_word_embeddings must be true or false, got 'yes'"),
    ({"rope_theta": "x"}, "rope_theta must be a number above 0, got 'x'"),
    ({"rms_norm_eps": 0}, "rms_norm_eps must be a number above 0, got 0"),
    # each failed only as the model was built (RoPE's message; a dataclass validation error)
    ({"hidden_size": 132}, "each head's width (132 / 4 heads = 33) must be even"),
])
def test_bad_options_are_refused_in_one_line(opts, message):
    with pytest.raises(ValueError) as info:
        L.check_opts(models.get("llama_tiny").opts(opts))
    assert message in str(info.value) and "\n" not in str(info.value)
    if opts.get("hidden_size") == 132:  # GPT-2's token ids; its width needs no even heads
        with pytest.raises(ValueError, match="eos_token_id must be a token id"):
            L.check_opts(models.get("gpt2_tiny").opts({"eos_token_id": "x"}))
        L.check_opts(models.get("gpt2_tiny").opts({"n_embd": 132, "eos_token_id": None}))


def test_checkpointing_an_inference_cell_is_refused_and_fsdp_on_one_process_warned(capsys):
    """Inference keeps nothing for a backward pass: Llama's cell failed in the FLOP count
    ('NoneType' object has no attribute 'next_functions'), GPT-2's measured its unchecked
    twin under another id. One process shards nothing: fsdp beside ddp there is one
    measurement twice, now said as other repeated measurements are."""
    config = {"studies": {"lm": {"grid": {
        "model": "llama_tiny", "device": "cpu", "phase": "inference",
        "model_opts": {"activation_checkpointing": True}}}}}
    with pytest.raises(study.ConfigError, match=r"^study 'lm': model_opts: activation_"
                                                r"checkpointing recomputes .*: phase training only"):
        study.expand_config(config)
    grid = config["studies"]["lm"]["grid"]
    grid.update(phase="training", num_gpus=[1, 2],
                model_opts=[{"parallel": "ddp"}, {"parallel": "fsdp"}])
    capsys.readouterr()
    assert len(study.expand_config(config)) == 4
    err = capsys.readouterr().err
    assert "study 'lm': 1 of its 4 cells repeat another's measurement" in err


def test_a_study_with_an_unknown_shape_field_is_refused_naming_it():
    config = {"studies": {"lm": {"grid": {"model": "llama_tiny", "device": "cpu",
                                          "model_opts": {"hidden": 64}}}}}
    with pytest.raises(study.ConfigError) as info:
        study.expand_config(config)
    assert "lm" in str(info.value) and "hidden" in str(info.value)


def test_activation_checkpointing_is_applied_and_a_step_still_learns():
    built = zoo.build("llama_tiny", {"activation_checkpointing": True, "sequence_length": 32})
    model = built.module.model
    assert getattr(model, "is_activation_checkpointing", None) or model.is_gradient_checkpointing
    built.module.train()
    ids = torch.randint(0, 1024, (2, 32))
    built.module(ids).float().sum().backward()
    assert all(p.grad is not None for p in built.module.parameters() if p.requires_grad)


def test_a_training_cell_through_the_runner_counts_tokens_and_uses_the_formula(tmp_path):
    opts = {"sequence_length": 64}
    done, res = run_runner(tmp_path, "--model=llama_tiny", "--dtype=float32", "--batch_size=2",
                           "--device=cpu", "--num_batches=3", "--num_warmup_batches=1",
                           f"--model_opts={json.dumps(opts)}")
    assert done.returncode == 0, done.stderr[-2000:]
    assert res["status"] == "ok", res["error"]
    (m,) = res["measurements"]
    assert m["throughput_unit"] == "tokens/s" and m["items_per_iteration"] == 2 * 64
    full = {**L.default_opts("llama_tiny"), **opts}
    assert m["flops_per_iteration"] == pytest.approx(2 * L.flops_per_sequence(full, True))
    assert m["parameters"] == L.parameter_count(full)
    extra = m["extra"]
    assert extra["attention"] == "sdpa" and extra["sequence_length"] == 64
    # The count, CPU flash attention included, recorded beside the formula it agrees with.
    assert extra["counted_flops_per_iteration"] == pytest.approx(m["flops_per_iteration"],
                                                                 rel=0.05)
    assert extra["loss_finite"] and "counted_flops_note" not in extra


def test_a_count_short_of_operators_it_has_no_formula_for_says_which(tmp_path):
    """Mixtral's experts multiply through operators the counter has no formula for: its
    count was less than half the formula, recorded without a word."""
    done, res = run_runner(tmp_path, "--model=mixtral_tiny", "--dtype=float32",
                           "--batch_size=1", "--device=cpu", "--num_batches=1",
                           "--num_warmup_batches=0", '--model_opts={"sequence_length": 16}')
    assert done.returncode == 0, done.stderr[-2000:]
    (m,) = res["measurements"]
    if m["extra"]["counted_flops_per_iteration"] >= 0.9 * m["flops_per_iteration"]:
        pytest.skip("this torch's counter counts Mixtral's expert products")
    assert m["extra"]["counted_flops_note"].startswith("FlopCounterMode has no formula for ")


def test_fsdp_shards_a_two_process_training_cell_per_decoder_layer(tmp_path):
    """FSDP2 (fully_shard) over two CPU processes (gloo): the cell runs, counts both ranks'
    tokens and records how the model was split; each rank built it on the meta device and
    holds half its weights (it built the whole model on each rank first)."""
    opts = {"sequence_length": 32, "parallel": "fsdp"}
    done, res = run_runner(tmp_path, "--model=llama_tiny", "--dtype=float32", "--batch_size=2",
                           "--device=cpu", "--num_gpus=2", "--num_batches=3",
                           "--num_warmup_batches=1", f"--model_opts={json.dumps(opts)}")
    assert done.returncode == 0, done.stderr[-2000:]
    assert res["status"] == "ok", res["error"]
    (m,) = res["measurements"]
    assert m["extra"]["parallel"] == "fsdp" and m["items_per_iteration"] == 2 * 2 * 32
    full = {**L.default_opts("llama_tiny"), **opts}
    assert m["flops_per_iteration"] == pytest.approx(2 * 2 * L.flops_per_sequence(full, True))
    # transformers before 5 cannot initialise a model built on meta: whole on each rank
    built_on = "meta" if torch_llm.initializes_on_meta() else "cpu"
    assert m["extra"]["built_on"] == built_on and m["extra"]["loss_finite"]
    shard = m["extra"]["rank0_parameter_bytes"] / (4 * L.parameter_count(full))  # float32
    assert 0.49 < shard < 0.51
    model = zoo.build("llama_tiny").module
    layers = torch_llm.decoder_layers(model)
    assert len(layers) == 2 and all(type(layer).__name__ == "LlamaDecoderLayer" for layer in layers)


def test_a_float_field_given_as_a_whole_number_builds_the_model():
    """rms_norm_eps: 1 (YAML's whole number) is a float to transformers, which refused the
    int when the model was built."""
    opts = models.get("llama_tiny").opts({"rms_norm_eps": 1, "rope_theta": 10000})
    L.check_opts(opts)
    fields = L.config_fields(opts)
    assert fields["rms_norm_eps"] == 1.0 and isinstance(fields["rms_norm_eps"], float)
    assert isinstance(fields["rope_theta"], float)


def test_an_error_announced_on_its_first_line_keeps_its_cause_in_the_row():
    """transformers' validation errors say "... for field 'x':" and the cause on the next
    line: a failed row kept the announcement alone."""
    from dlbench import cellrun

    error = ValueError("Validation error for field 'tie_word_embeddings':\n"
                       "  expected bool, got str\n  more detail")
    assert cellrun.one_line(error) == ("ValueError: Validation error for field "
                                       "'tie_word_embeddings': expected bool, got str")
    assert cellrun.one_line(RuntimeError("CUDA out of memory.\nTried to allocate")) == \
        "RuntimeError: CUDA out of memory."


@pytest.fixture
def one_process_group():
    """A process group of this process alone (gloo), which fully_shard needs."""
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize(("name", "dtype"), [("llama_tiny", torch.float32),
                                             ("llama_tiny", torch.float64),
                                             ("gpt2_tiny", torch.float32),
                                             ("mixtral_tiny", torch.float32)])
@pytest.mark.usefixtures("one_process_group")
def test_an_fsdp_model_built_on_meta_is_initialised_as_an_eager_build(name, dtype):
    """An FSDP cell's model is built on the meta device, sharded, and given storage for its
    shard by to_empty, which leaves weights and buffers garbage: its buffers (RoPE's,
    computed as the model is built) equal an eager build's, in the dtype its cast gives
    them; its weights are finite with an eager build's spread (norms ones, biases zeros);
    and an eager build given those weights computes the same logits."""
    from dlbench.pytorch import runner

    torch.manual_seed(0)
    opts = {"sequence_length": 16}
    with torch.device("meta"):
        built = zoo.build(name, opts)
    if built.init_weights is None:
        pytest.skip("transformers before 5 cannot initialise a model built on meta")
    sharded = runner.fsdp_sharded(built, torch.device("cpu"), dtype)
    assert built.facts["built_on"] == "meta"
    eager = zoo.build(name, opts).module.to(dtype=dtype)
    buffers = dict(sharded.named_buffers())
    assert buffers.keys() == dict(eager.named_buffers()).keys()
    for key, value in eager.named_buffers():
        assert buffers[key].dtype == value.dtype and torch.equal(buffers[key], value), key
    weights = {key: value.full_tensor() for key, value in sharded.state_dict().items()}
    for key, value in eager.state_dict().items():
        got = weights[key]
        assert got.dtype == value.dtype and bool(got.isfinite().all()), key
        if value.std() == 0:
            assert torch.equal(got, value), key
        else:
            assert float(got.std()) == pytest.approx(float(value.std()), rel=0.2), key
            assert abs(float(got.mean())) < 0.2 * float(value.std()), key
    eager.load_state_dict(weights)
    ids = torch.randint(0, opts.get("vocab_size", 1024), (2, 16))
    with torch.no_grad():  # in eval mode: GPT-2's dropout would make them differ
        torch.testing.assert_close(sharded.eval()(ids), eager.eval()(ids))
