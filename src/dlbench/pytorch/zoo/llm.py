"""Decoder-only language models from Hugging Face ``transformers`` configurations, with
random weights (nothing is downloaded): Llama (RMSNorm, RoPE, SwiGLU, grouped-query
attention), GPT-2 and Mixtral (mixture of experts). Shapes and FLOPs: ``dlbench.models.llm``.

Attention runs through PyTorch's scaled-dot-product attention (``attn_implementation=
"sdpa"``); the result records it and, on a GPU, which SDPA kernels PyTorch may pick.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from dlbench.cellrun import CellError
from dlbench.models import ModelSpec
from dlbench.models import llm as L
from dlbench.pytorch.zoo import BuiltModel


class CausalLM(nn.Module):
    """Token ids (N, T) -> next-token logits (N, T, vocab); no KV cache (full sequences)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=ids, use_cache=False).logits


def decoder_layers(module: nn.Module) -> list[nn.Module]:
    """The decoder layers: the model's first module list (Llama's and Mixtral's
    ``model.layers``, GPT-2's ``transformer.h``), FSDP's units of sharding."""
    return list(next(m for m in module.modules() if isinstance(m, nn.ModuleList)))


def initialize(module: nn.Module) -> None:
    """Random weights for a CausalLM built on the meta device and given uninitialised
    storage (``to_empty``), as transformers initialises a model it builds (normal with the
    configuration's ``initializer_range``, GPT-2's scaled residual projections, norms ones),
    and the buffers it computes as it is built (RoPE's inverse frequencies, which
    ``to_empty`` left garbage): transformers' own initialisation of the model it loads from
    the meta device. FSDP2's DTensor shards are initialised in place, each rank its own."""
    module.model.initialize_weights()


def initializes_on_meta() -> bool:
    """Whether this transformers recomputes the non-persistent buffers (RoPE's) when it
    initialises a model: from release 5; earlier ones compute them only in the
    constructor."""
    import transformers

    return int(transformers.__version__.split(".")[0]) >= 5


def sdpa_backends() -> dict[str, bool]:
    """The SDPA kernels PyTorch may choose from on CUDA (it picks per call)."""
    cuda = torch.backends.cuda
    return {"flash": cuda.flash_sdp_enabled(), "memory_efficient": cuda.mem_efficient_sdp_enabled(),
            "cudnn": cuda.cudnn_sdp_enabled(), "math": cuda.math_sdp_enabled()}


def make(name: str, opts: dict[str, Any]) -> nn.Module:
    """The transformers model of preset ``name`` with ``opts``, randomly initialised."""
    try:
        import transformers
    except ImportError as exc:
        raise CellError(f"model {name} needs the transformers package ({exc}): "
                        "pip install transformers") from None
    config_class = getattr(transformers, L.FAMILIES[L.family(name)])
    config = config_class(**L.config_fields(opts))
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    if opts["activation_checkpointing"]:
        # transformers 5 renamed it; older releases (a lent GPU machine's) have the old name.
        enable = getattr(model, "activation_checkpointing_enable", None)
        (enable or model.gradient_checkpointing_enable)()
    return model


def build(spec: ModelSpec, opts: dict[str, Any]) -> BuiltModel:
    module = CausalLM(make(spec.name, opts))
    tokens = opts["sequence_length"]
    facts: dict[str, Any] = {
        "sequence_length": tokens, "attention": "sdpa",
        "activation_checkpointing": opts["activation_checkpointing"],
        "flops_formula": "PaLM: 6·N·T + 12·L·H·Q·T² per sequence in training, a third in "
                         "inference (dlbench.models.llm)",
        "matmul_weights": L.matmul_weights(opts),
    }
    if torch.cuda.is_available():
        facts["sdpa_backends"] = sdpa_backends()
    vocab = opts["vocab_size"]
    return BuiltModel(
        module=module, input_shape=(tokens,), num_classes=vocab, input_kind="tokens",
        vocab_size=vocab, optimizer="adam", facts=facts, throughput_unit="tokens/s",
        items_per_sample=tokens, parallel=opts["parallel"], shard_units=decoder_layers,
        init_weights=initialize if initializes_on_meta() else None,
        flops_per_sample=lambda training: L.flops_per_sequence(opts, training))
