"""BERT encoders with the masked-LM head, built from torch.nn primitives.

The structure is BertForMaskedLM's (Devlin et al. 2018): word, learned position and
token-type embeddings with LayerNorm; post-norm encoder layers with GELU; a head that
transforms (dense, GELU, LayerNorm) and decodes with the word-embedding matrix (tied) plus
a bias. No pooler: the masked-LM model does not use one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from dlbench.models import ModelSpec
from dlbench.pytorch.zoo import BuiltModel

MAX_POSITIONS = 512
TYPE_VOCAB = 2
LAYER_NORM_EPS = 1e-12
DROPOUT = 0.1
INIT_STD = 0.02


@dataclass(frozen=True)
class BertShape:
    hidden: int
    layers: int
    heads: int
    intermediate: int


SHAPES = {
    "bert_base": BertShape(hidden=768, layers=12, heads=12, intermediate=3072),
    "bert_large": BertShape(hidden=1024, layers=24, heads=16, intermediate=4096),
}


class BertEmbeddings(nn.Module):
    def __init__(self, vocab_size: int, hidden: int) -> None:
        super().__init__()
        self.word = nn.Embedding(vocab_size, hidden)
        self.position = nn.Embedding(MAX_POSITIONS, hidden)
        self.token_type = nn.Embedding(TYPE_VOCAB, hidden)
        self.norm = nn.LayerNorm(hidden, eps=LAYER_NORM_EPS)
        self.dropout = nn.Dropout(DROPOUT)
        self.register_buffer("positions", torch.arange(MAX_POSITIONS), persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = self.positions[: ids.shape[1]]
        # One segment: every token has type 0.
        x = self.word(ids) + self.position(positions) + self.token_type.weight[0]
        return self.dropout(self.norm(x))


class BertForMaskedLM(nn.Module):
    """Token ids (N, L) -> logits over the vocabulary (N, L, vocab_size)."""

    def __init__(self, shape: BertShape, vocab_size: int) -> None:
        super().__init__()
        self.embeddings = BertEmbeddings(vocab_size, shape.hidden)
        layer = nn.TransformerEncoderLayer(
            shape.hidden, shape.heads, dim_feedforward=shape.intermediate, dropout=DROPOUT,
            activation="gelu", layer_norm_eps=LAYER_NORM_EPS, batch_first=True,
            norm_first=False,
        )
        self.encoder = nn.TransformerEncoder(layer, shape.layers, enable_nested_tensor=False)
        self.transform = nn.Sequential(
            nn.Linear(shape.hidden, shape.hidden), nn.GELU(),
            nn.LayerNorm(shape.hidden, eps=LAYER_NORM_EPS),
        )
        self.decoder = nn.Linear(shape.hidden, vocab_size)
        self.apply(_init_weights)
        nn.init.zeros_(self.decoder.bias)
        # Tied: the decoder's weight is the word-embedding matrix (vocab_size, hidden).
        self.decoder.weight = self.embeddings.word.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.transform(self.encoder(self.embeddings(ids))))


def _init_weights(module: nn.Module) -> None:
    # BERT's initialization: N(0, 0.02) weights, zero biases, unit LayerNorm.
    if isinstance(module, nn.Linear | nn.Embedding):
        nn.init.normal_(module.weight, std=INIT_STD)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)
    elif isinstance(module, nn.MultiheadAttention):
        nn.init.normal_(module.in_proj_weight, std=INIT_STD)
        nn.init.zeros_(module.in_proj_bias)


def _check_opts(name: str, opts: dict[str, Any]) -> tuple[int, int]:
    values = []
    for key, maximum in (("sequence_length", MAX_POSITIONS), ("vocab_size", None)):
        value = opts.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: model_opts.{key} must be a positive integer, got {value!r}")
        if maximum is not None and value > maximum:
            raise ValueError(f"{name}: model_opts.{key} must be <= {maximum} (BERT's position "
                             f"embeddings), got {value}")
        values.append(value)
    return values[0], values[1]


def build(spec: ModelSpec, opts: dict[str, Any]) -> BuiltModel:
    if spec.name not in SHAPES:
        raise KeyError(f"no transformer named {spec.name!r} (valid: {', '.join(SHAPES)})")
    sequence_length, vocab_size = _check_opts(spec.name, opts)
    module = BertForMaskedLM(SHAPES[spec.name], vocab_size)
    return BuiltModel(module, (sequence_length,), vocab_size, spec.input_kind,
                      vocab_size=vocab_size)
