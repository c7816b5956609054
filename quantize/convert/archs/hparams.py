"""Hyperparameter metadata shared by the decoder-only families: GGUF keys from config.json.

The keys and the config names they come from follow convert_hf_to_gguf's
``TextModel.set_gguf_parameters``; llama.cpp reads them in ``llama_model::load_hparams``.
Values missing from config.json get no key, so llama.cpp applies its own defaults.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

from quantize.ggml_types import GGUFValueType

from models.foundation.errors import QuantDeskError
from quantize.source import MetadataEntry

U32, F32, STR, BOOL, ARR = (GGUFValueType.UINT32, GGUFValueType.FLOAT32, GGUFValueType.STRING,
                            GGUFValueType.BOOL, GGUFValueType.ARRAY)



def u32(key: str, value: Any) -> MetadataEntry:
    return MetadataEntry(key, int(value), U32)


def f32(key: str, value: Any) -> MetadataEntry:
    return MetadataEntry(key, float(value), F32)


def find(config: dict, names: Iterable[str], default: Any = None) -> Any:
    """The first of ``names`` present (and not null) in ``config``."""
    for name in names:
        if config.get(name) is not None:
            return config[name]
    return default


def require(config: dict, name: str) -> Any:
    if config.get(name) is None:
        raise QuantDeskError(f"config.json lacks \"{name}\", which this architecture needs.",
                             "Use the config.json published with the model.")
    return config[name]


def head_dim(config: dict) -> int:
    """Per-head width: ``head_dim`` when given, else hidden_size / num_attention_heads."""
    if config.get("head_dim") is not None:
        return int(config["head_dim"])
    return int(require(config, "hidden_size")) // int(require(config, "num_attention_heads"))


#: config.json names of the expert count and of the experts each token uses.
EXPERT_COUNT_NAMES = ("num_local_experts", "num_experts", "n_routed_experts")
EXPERTS_USED_NAMES = ("num_experts_per_tok", "num_experts_per_token", "top_k_experts")


def expert_count(config: dict) -> int:
    """Experts per MoE layer (0 for a dense model)."""
    return int(find(config, EXPERT_COUNT_NAMES, 0))


def rope_parameters(config: dict) -> dict:
    """RoPE settings of the full-attention layers, old (``rope_scaling``) or new format.

    transformers 5 writes ``rope_parameters`` (per layer type for Gemma 3); older configs
    have top-level ``rope_theta`` and an optional ``rope_scaling`` dict.
    """
    params = dict(config.get("rope_parameters") or config.get("rope_scaling") or {})
    params = dict(params.get("full_attention", params))
    if "rope_type" not in params and "type" in params:
        params["rope_type"] = params["type"]
    if "rope_theta" not in params:
        theta = find(config, ("rope_theta", "rotary_emb_base"))
        if theta is not None:
            params["rope_theta"] = theta
    if "original_max_position_embeddings" not in params and "original_max_position_embeddings" in config:
        params["original_max_position_embeddings"] = config["original_max_position_embeddings"]
    return params


def sliding_rope_theta(config: dict) -> Optional[float]:
    """RoPE base of sliding-window layers (Gemma 3's ``rope_local_base_freq``)."""
    per_type = config.get("rope_parameters") or {}
    local = (per_type.get("sliding_attention") or {}).get("rope_theta") if isinstance(per_type, dict) else None
    return find(config, ("rope_local_base_freq", "local_rope_theta")) if local is None else local


def rope_scaling_entries(arch: str, params: dict) -> list[MetadataEntry]:
    """``rope.scaling.*`` keys for linear and YaRN scaling (Llama 3 uses a tensor instead)."""
    rope_type = str(params.get("rope_type") or "default").lower()
    factor = params.get("factor")
    out: list[MetadataEntry] = []
    if rope_type == "linear" and factor is not None:
        out += [MetadataEntry(f"{arch}.rope.scaling.type", "linear", STR),
                f32(f"{arch}.rope.scaling.factor", factor)]
    elif rope_type == "yarn" and factor is not None:
        out += [MetadataEntry(f"{arch}.rope.scaling.type", "yarn", STR),
                f32(f"{arch}.rope.scaling.factor", factor),
                u32(f"{arch}.rope.scaling.original_context_length",
                    params["original_max_position_embeddings"])]
        for key, names in (("yarn_ext_factor", ("extrapolation_factor",)),
                           ("yarn_attn_factor", ("attention_factor", "attn_factor")),
                           ("yarn_beta_fast", ("beta_fast",)), ("yarn_beta_slow", ("beta_slow",))):
            value = find(params, names)
            if value is not None:
                out.append(f32(f"{arch}.rope.scaling.{key}", value))
    elif rope_type not in ("default", "llama3", "mrope"):  # M-RoPE: sections, no scaling
        raise QuantDeskError(
            f"config.json asks for RoPE scaling \"{rope_type}\", which QuantDesk cannot convert "
            "for this architecture yet.", "Convert a variant of the model without it.")
    return out


def text_model_entries(config: dict, arch: str) -> list[MetadataEntry]:
    """The keys every decoder-only family here writes (TextModel.set_gguf_parameters)."""
    out = [u32(f"{arch}.block_count", require(config, "num_hidden_layers"))]
    simple = (
        ("context_length", ("max_position_embeddings", "n_ctx", "n_positions"), u32),
        ("embedding_length", ("hidden_size",), u32),
        ("feed_forward_length", ("intermediate_size",), u32),
        ("attention.head_count", ("num_attention_heads",), u32),
        ("attention.head_count_kv", ("num_key_value_heads",), u32),
        ("attention.layer_norm_rms_epsilon", ("rms_norm_eps",), f32),
        ("expert_count", EXPERT_COUNT_NAMES, u32),
        ("expert_used_count", EXPERTS_USED_NAMES, u32),
    )
    for key, names, make in simple:
        value = find(config, names)
        if value is not None:
            out.append(make(f"{arch}.{key}", value))
    params = rope_parameters(config)
    out += rope_scaling_entries(arch, params)
    if params.get("rope_theta") is not None:
        out.append(f32(f"{arch}.rope.freq_base", params["rope_theta"]))
    if config.get("head_dim") is not None:
        out += [u32(f"{arch}.attention.key_length", config["head_dim"]),
                u32(f"{arch}.attention.value_length", config["head_dim"])]
    return out


def sliding_window_entries(config: dict, arch: str) -> list[MetadataEntry]:
    """``attention.sliding_window`` and, from ``layer_types``, the per-layer SWA pattern.

    llama.cpp's Gemma loaders assume a fixed pattern (every 2nd / 6th layer global) unless
    the file carries ``attention.sliding_window_pattern`` as one bool per layer; writing the
    checkpoint's own ``layer_types`` keeps configs with other patterns faithful.
    """
    out = []
    if config.get("sliding_window") is not None:
        out.append(u32(f"{arch}.attention.sliding_window", config["sliding_window"]))
    layer_types = config.get("layer_types")
    if isinstance(layer_types, list) and layer_types:
        out.append(MetadataEntry(f"{arch}.attention.sliding_window_pattern",
                                 [t == "sliding_attention" for t in layer_types], ARR, BOOL))
    return out
