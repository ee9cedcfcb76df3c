"""Decoder-only language models: presets with the published shapes, their parameter counts
and the standard FLOP formula, without importing a framework.

Each preset is a Hugging Face ``transformers`` configuration (its class and fields); the
PyTorch builder (``dlbench.pytorch.zoo.llm``) makes the model from it with random weights,
so nothing is downloaded. A study's ``model_opts`` overrides any field of it, plus
``sequence_length`` (tokens per sample), ``activation_checkpointing`` and ``parallel``.

FLOPs (PaLM, Chowdhery et al. 2022, appendix B): a token costs 6·N matmul FLOPs in training
(2·N forward, 4·N backward) with N the weights a token is multiplied by (every linear layer
and the output projection; the input embedding is a lookup), plus the attention's
12·L·H·Q·T (L layers, H heads of size Q, T tokens of context): per sequence of T tokens,
6·N·T + 12·L·H·Q·T². Inference is a third of that. A mixture of experts counts the experts
a token is routed to (``num_experts_per_tok``) and the router.
"""

from __future__ import annotations

from typing import Any

FAMILIES = {"llama": "LlamaConfig", "gpt2": "GPT2Config", "mixtral": "MixtralConfig"}
LLAMA_3 = {"vocab_size": 128256, "max_position_embeddings": 8192, "rope_theta": 500000.0,
           "rms_norm_eps": 1e-5, "tie_word_embeddings": False}
PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    "llama3_8b": ("llama", {**LLAMA_3, "hidden_size": 4096, "intermediate_size": 14336,
                            "num_hidden_layers": 32, "num_attention_heads": 32,
                            "num_key_value_heads": 8}),
    "llama3_70b": ("llama", {**LLAMA_3, "hidden_size": 8192, "intermediate_size": 28672,
                             "num_hidden_layers": 80, "num_attention_heads": 64,
                             "num_key_value_heads": 8}),
    "gpt2_xl": ("gpt2", {"vocab_size": 50257, "n_embd": 1600, "n_layer": 48, "n_head": 25,
                         "n_positions": 1024}),
    "mixtral_8x7b": ("mixtral", {"vocab_size": 32000, "hidden_size": 4096,
                                 "intermediate_size": 14336, "num_hidden_layers": 32,
                                 "num_attention_heads": 32, "num_key_value_heads": 8,
                                 "num_local_experts": 8, "num_experts_per_tok": 2,
                                 "max_position_embeddings": 32768, "rope_theta": 1e6,
                                 "rms_norm_eps": 1e-5, "tie_word_embeddings": False}),
    # Small enough for 2 CPU cores: the same families, a few layers of width 128.
    "llama_tiny": ("llama", {"vocab_size": 1024, "hidden_size": 128, "intermediate_size": 344,
                             "num_hidden_layers": 2, "num_attention_heads": 4,
                             "num_key_value_heads": 2, "max_position_embeddings": 1024,
                             "rope_theta": 10000.0, "rms_norm_eps": 1e-5,
                             "tie_word_embeddings": False}),
    "gpt2_tiny": ("gpt2", {"vocab_size": 1024, "n_embd": 128, "n_layer": 2, "n_head": 4,
                           "n_positions": 1024, "bos_token_id": 0, "eos_token_id": 0}),
    "mixtral_tiny": ("mixtral", {"vocab_size": 1024, "hidden_size": 128,
                                 "intermediate_size": 256, "num_hidden_layers": 2,
                                 "num_attention_heads": 4, "num_key_value_heads": 2,
                                 "num_local_experts": 4, "num_experts_per_tok": 2,
                                 "max_position_embeddings": 1024, "rope_theta": 1e6,
                                 "rms_norm_eps": 1e-5, "tie_word_embeddings": False}),
}
# Published parameter counts (model cards; GPT-2 XL with its tied output projection).
PUBLISHED = {"llama3_8b": 8_030_261_248, "llama3_70b": 70_553_706_496,
             "gpt2_xl": 1_557_611_200, "mixtral_8x7b": 46_702_792_704}
# ``parallel``: how a multi-device training cell splits the model: "ddp" replicates it,
# "fsdp" shards weights, gradients and optimizer state over the devices (FSDP2's
# fully_shard, per decoder layer), for models that do not fit one device.
RUN_OPTS = {"sequence_length": 128, "activation_checkpointing": False, "parallel": "ddp"}
PARALLEL = ("ddp", "fsdp")
INTEGER_FIELDS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                  "num_attention_heads", "num_key_value_heads", "max_position_embeddings",
                  "num_local_experts", "num_experts_per_tok", "n_embd", "n_layer", "n_head",
                  "n_positions", "sequence_length")


def family(name: str) -> str:
    return PRESETS[name][0]


def default_opts(name: str) -> dict[str, Any]:
    return {**PRESETS[name][1], **RUN_OPTS}


def config_fields(opts: dict[str, Any]) -> dict[str, Any]:
    """The transformers configuration's fields of a full option set (a float field given
    as a whole number, 1 for 1.0, as a float: transformers refuses an int there)."""
    return {k: float(v) if k in FLOAT_FIELDS else v for k, v in opts.items()
            if k not in RUN_OPTS}


def _shape(opts: dict[str, Any]) -> tuple[int, int, int, int, int]:
    """(vocab, width, layers, heads, context limit) of either naming."""
    if "n_embd" in opts:
        return (opts["vocab_size"], opts["n_embd"], opts["n_layer"], opts["n_head"],
                opts["n_positions"])
    return (opts["vocab_size"], opts["hidden_size"], opts["num_hidden_layers"],
            opts["num_attention_heads"], opts["max_position_embeddings"])


def context(opts: dict[str, Any]) -> int:
    """The positions the model can attend over."""
    return _shape(opts)[4]


def check_opts(opts: dict[str, Any]) -> None:
    """One line naming the option when a set of options cannot make a model (a model
    cell's: the configuration's fields and the run options)."""
    check_config(opts)
    if not isinstance(opts.get("activation_checkpointing"), bool):
        raise ValueError("llm: activation_checkpointing must be true or false, got "
                         f"{opts.get('activation_checkpointing')!r}")
    if opts.get("parallel") not in PARALLEL:
        raise ValueError(f"llm: parallel must be one of {', '.join(PARALLEL)}, "
                         f"got {opts.get('parallel')!r}")
    limit = context(opts)
    if opts["sequence_length"] > limit:
        raise ValueError(f"llm: sequence_length {opts['sequence_length']} exceeds the "
                         f"model's context of {limit} positions")


# The other fields' kinds, as the presets give them: transformers' configurations refuse
# another type (a bool as text) only when the model is built, in a message of two lines.
FLOAT_FIELDS = ("rope_theta", "rms_norm_eps")
BOOL_FIELDS = ("tie_word_embeddings",)
TOKEN_ID_FIELDS = ("bos_token_id", "eos_token_id")


def check_config(opts: dict[str, Any]) -> None:
    """One line naming the field when the configuration's fields of ``opts`` cannot make
    a model (an inference cell has no run options: its length is its prompt and output)."""
    for name in INTEGER_FIELDS:
        if name in opts:
            value = opts[name]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"llm: {name} must be a positive integer, got {value!r}")
    for name in FLOAT_FIELDS:  # 1 is a number as 1.0 is (YAML writes either)
        value = opts.get(name)
        if name in opts and (isinstance(value, bool) or not isinstance(value, (int, float))
                             or not value > 0):
            raise ValueError(f"llm: {name} must be a number above 0, got {value!r}")
    for name in BOOL_FIELDS:
        if name in opts and not isinstance(opts[name], bool):
            raise ValueError(f"llm: {name} must be true or false, got {opts[name]!r}")
    for name in TOKEN_ID_FIELDS:
        value = opts.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 0):
            raise ValueError(f"llm: {name} must be a token id (an integer >= 0) or null, "
                             f"got {value!r}")
    _, width, _, heads, _ = _shape(opts)
    if width % heads:
        raise ValueError(f"llm: the width ({width}) must be a multiple of the heads ({heads})")
    kv = opts.get("num_key_value_heads", heads)
    if heads % kv:
        raise ValueError(f"llm: num_attention_heads ({heads}) must be a multiple of "
                         f"num_key_value_heads ({kv})")
    if "rope_theta" in opts and (width // heads) % 2:
        raise ValueError(f"llm: each head's width ({width} / {heads} heads = {width // heads}) "
                         "must be even: rotary position embeddings turn pairs of values")
    experts = opts.get("num_local_experts")
    if experts is not None and opts["num_experts_per_tok"] > experts:
        raise ValueError(f"llm: num_experts_per_tok ({opts['num_experts_per_tok']}) exceeds "
                         f"num_local_experts ({experts})")


def _layer(opts: dict[str, Any], experts: float) -> tuple[float, float]:
    """(weights a token is multiplied by, other parameters) of one decoder layer, with
    ``experts`` of its feed-forward experts (all of them for the parameter count)."""
    if "n_embd" in opts:  # GPT-2: fused QKV, 4x MLP, biases and two LayerNorms
        d = opts["n_embd"]
        return 12 * d * d, 3 * d + d + 4 * d + d + 4 * d
    d, inner = opts["hidden_size"], opts["intermediate_size"]
    head = d // opts["num_attention_heads"]
    kv = opts["num_key_value_heads"] * head
    attention = d * d + 2 * d * kv + d * d
    mlp = 3 * d * inner * experts
    router = d * opts["num_local_experts"] if "num_local_experts" in opts else 0
    return attention + mlp + router, 2 * d


def parameter_count(opts: dict[str, Any]) -> int:
    vocab, width, layers, _, limit = _shape(opts)
    matmul, other = _layer(opts, opts.get("num_local_experts", 1))
    if "n_embd" in opts:  # token and position embeddings, final LayerNorm; head tied
        return int(vocab * width + limit * width + layers * (matmul + other) + 2 * width)
    head = 0 if opts.get("tie_word_embeddings") else vocab * width
    return int(vocab * width + layers * (matmul + other) + width + head)


def matmul_weights(opts: dict[str, Any]) -> int:
    """N of the formula: the weights one token is multiplied by (routed experts only)."""
    vocab, width, layers, _, _ = _shape(opts)
    matmul, _ = _layer(opts, opts.get("num_experts_per_tok", 1))
    return int(layers * matmul + vocab * width)  # the output projection, tied or not


def kv_cache_bytes(opts: dict[str, Any], batch: int, length: int, element_size: int) -> int:
    """A static cache's size: keys and values of every layer, ``length`` positions of
    ``batch`` sequences, for each key/value head (grouped-query attention has fewer)."""
    _, width, layers, heads, _ = _shape(opts)
    kv_heads = opts.get("num_key_value_heads", heads)
    return 2 * layers * batch * kv_heads * length * (width // heads) * element_size


def experts_reached(opts: dict[str, Any], tokens: int) -> float:
    """How many of a layer's feed-forward experts ``tokens`` tokens are expected to reach,
    each routed to ``num_experts_per_tok`` of them uniformly: E·(1 − (1 − k/E)^tokens); 1
    for a dense model."""
    experts = opts.get("num_local_experts")
    if not experts:
        return 1.0
    return experts * (1 - (1 - opts["num_experts_per_tok"] / experts) ** tokens)


def bytes_per_decode_step(opts: dict[str, Any], batch: int, context: float,
                          element_size: int) -> float:
    """What one decode step of ``batch`` sequences moves through the device's memory at
    least, at ``context`` cached positions: every weight the step multiplies by (a
    mixture's experts as many as ``experts_reached``; the output projection whole), the
    embedding rows of its tokens, the KV cache of the context read and the new position's
    keys and values written. Activations are left out (MiBs beside GiBs of weights): a
    floor, so the bandwidth it gives is a floor too. Decode is bound by this traffic, not
    by its FLOPs."""
    vocab, width, layers, _, _ = _shape(opts)
    matmul, other = _layer(opts, experts_reached(opts, batch))
    # GPT-2 gathers a position row beside each token's, and its final LayerNorm has a bias.
    rows, norm = (2, 2) if "n_embd" in opts else (1, 1)
    weights = layers * (matmul + other) + vocab * width + (rows * batch + norm) * width
    cache = kv_cache_bytes(opts, batch, round(context) + 1, element_size)
    return float(weights * element_size + cache)


def flops_per_decode_step(opts: dict[str, Any], context: float) -> float:
    """One new token of one sequence attending over ``context`` cached positions and
    itself: 2·N + 4·L·H·Q·(t + 1)."""
    _, width, layers, _, _ = _shape(opts)
    return float(2 * matmul_weights(opts) + 4 * layers * width * (context + 1))


def flops_per_prefill(opts: dict[str, Any], last_logits_only: bool) -> float:
    """A prompt of T = sequence_length tokens read into the cache: the inference count of
    ``flops_per_sequence``, less the output projection of all but the last position where
    only its logits are made (a server's prefill keeps the next token's: 2·V·d·(T-1) less)."""
    vocab, width, _, _, _ = _shape(opts)
    skipped = 2 * vocab * width * (opts["sequence_length"] - 1) if last_logits_only else 0
    return flops_per_sequence(opts, training=False) - skipped


def flops_per_sequence(opts: dict[str, Any], training: bool) -> float:
    """6·N·T + 12·L·H·Q·T² (training) or a third of it (inference) for T = sequence_length."""
    _, width, layers, _, _ = _shape(opts)
    tokens = opts["sequence_length"]
    train = 6 * matmul_weights(opts) * tokens + 12 * layers * width * tokens * tokens
    return float(train if training else train / 3)
