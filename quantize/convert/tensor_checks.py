"""Check a checkpoint's tensors against its config before anything is written.

A tensor whose shape disagrees with config.json (a wrong config beside the weights, a
half-downloaded shard from another model), or a layer missing a tensor the others have,
would give llama.cpp a file it refuses or, worse, runs wrongly. We find out first and
say which tensor, which file and what config.json implies.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Optional

from models.foundation.errors import QuantDeskError
from quantize.convert.archs.hparams import expert_count, head_dim, require
from quantize.convert.safetensors_reader import TensorRecord


def _ffn_width(module: str, config: dict) -> int:
    """Width of the feed-forward ``module`` belongs to: an expert's, the shared expert's
    (Qwen2-MoE) or the dense MLP's."""
    if ".shared_expert." in module:
        return int(config.get("shared_expert_intermediate_size") or 0)
    if ".experts." in module:
        return int(config.get("moe_intermediate_size") or config.get("intermediate_size") or 0)
    return int(config.get("intermediate_size") or 0)


def expected_shape(module: str, kind: str, config: dict,
                   qk_norm_whole: bool = False) -> Optional[tuple[int, ...]]:
    """HF shape of ``module.kind`` implied by ``config``, or ``None`` if not derivable.

    ``qk_norm_whole``: Q/K norms span all heads (OLMoE) instead of one head.
    """
    hidden = int(require(config, "hidden_size"))
    heads = int(require(config, "num_attention_heads"))
    kv_heads = int(config.get("num_key_value_heads") or heads)
    hd = head_dim(config)
    inter = _ffn_width(module, config)
    vocab = int(require(config, "vocab_size"))
    leaf = module.rsplit(".", 1)[-1]
    outputs = {  # rows of each projection (its output width); Mixtral's experts: w1 w3 w2
        "q_proj": heads * hd, "k_proj": kv_heads * hd, "v_proj": kv_heads * hd,
        "qkv_proj": (heads + 2 * kv_heads) * hd,
        "o_proj": hidden, "gate_proj": inter, "up_proj": inter, "gate_up_proj": 2 * inter,
        "down_proj": hidden, "w1": inter, "w3": inter, "w2": hidden,
    }
    inputs = {"o_proj": heads * hd, "down_proj": inter, "w2": inter}
    if module in ("model.embed_tokens", "lm_head"):
        return (vocab, hidden) if kind == "weight" else None
    if leaf.endswith("norm"):
        if leaf in ("q_norm", "k_norm"):
            return ((heads if leaf == "q_norm" else kv_heads) * hd,) if qk_norm_whole else (hd,)
        return (hidden,)
    if module.endswith((".mlp.gate", ".block_sparse_moe.gate")) and kind == "weight":
        n_expert = expert_count(config)
        return (n_expert, hidden) if n_expert else None
    if leaf == "shared_expert_gate" and kind == "weight":
        return (1, hidden)
    if leaf in outputs:
        if kind == "bias":
            return (outputs[leaf],)
        return (outputs[leaf], inputs.get(leaf, hidden))
    return None


def check_tensors(records: dict[str, TensorRecord], config: dict, folder: str,
                  qk_norm_whole: bool = False) -> None:
    """Raise :class:`QuantDeskError` unless every tensor fits ``config`` and layers agree."""
    n_layers = int(require(config, "num_hidden_layers"))
    per_layer: dict[int, set[str]] = defaultdict(set)
    for name, record in records.items():
        module, _, kind = name.rpartition(".")
        want = expected_shape(module, kind, config, qk_norm_whole)
        if want is not None and tuple(record.shape) != want:
            raise QuantDeskError(
                f"Tensor {name} in {record.file.path.name} has shape {list(record.shape)}, but "
                f"config.json (hidden_size={config.get('hidden_size')}, "
                f"num_attention_heads={config.get('num_attention_heads')}, "
                f"num_key_value_heads={config.get('num_key_value_heads')}, "
                f"intermediate_size={_ffn_width(module, config)}, "
                f"vocab_size={config.get('vocab_size')}) implies {list(want)}.",
                f"The weights and config.json of {folder} do not belong together; download "
                "the model again.")
        parts = name.split(".", 3)
        if len(parts) == 4 and parts[:2] == ["model", "layers"] and parts[2].isdecimal():
            layer = int(parts[2])
            if layer >= n_layers:
                raise QuantDeskError(
                    f"Tensor {name} belongs to layer {layer}, but config.json says the model "
                    f"has {n_layers} layers.", f"Download {folder} again.")
            per_layer[layer].add(parts[3])
    if "model.embed_tokens.weight" not in records:
        raise QuantDeskError(f"{folder} has no model.embed_tokens.weight tensor.",
                             "Download the model again; its weights are incomplete.")
    everything = set().union(*per_layer.values()) if per_layer else set()
    for layer in range(n_layers):
        missing = sorted(everything - per_layer.get(layer, set()))
        if missing:
            raise QuantDeskError(
                f"Layer {layer} of {folder} lacks tensor(s) other layers have: "
                f"model.layers.{layer}.{missing[0]}" + (f" and {len(missing) - 1} more" if len(missing) > 1 else "") + ".",
                "A weight shard is probably missing or incomplete; download the model again.")
