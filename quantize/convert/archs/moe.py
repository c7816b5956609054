"""What the mixture-of-experts families share: the routing checks and the expert widths.

llama.cpp's MoE graphs (``build_moe_ffn``) route each token to ``expert_used_count`` of
``expert_count`` experts by a softmax over the router's logits; whether the chosen
experts' weights are then renormalised to sum to 1 is fixed per architecture in its
graph (``qwen3moe`` and Mixtral's ``llama`` do, ``qwen2moe`` and ``olmoe`` do not), with
no GGUF key to change it. transformers reads ``norm_topk_prob`` instead, so a checkpoint
whose setting differs from its llama.cpp graph would convert into a model that computes
something else: it is refused. So are layouts the graphs do not have (Qwen's dense
layers between sparse ones, ``decoder_sparse_step`` / ``mlp_only_layers``).
"""

from __future__ import annotations

from typing import Optional

from models.foundation.errors import QuantDeskError
from quantize.convert.archs.hparams import EXPERTS_USED_NAMES, expert_count, find, head_dim, u32


def _refuse(what: str) -> QuantDeskError:
    return QuantDeskError(what, "This checkpoint cannot be converted faithfully.")


def check_routing(config: dict, family: str, renormalises: bool, default_norm: bool = False) -> None:
    """Refuse a MoE config whose routing llama.cpp's ``family`` graph would not reproduce.

    Args:
        config: The (completed) config.json.
        family: The family's name for people ("Qwen3-MoE").
        renormalises: Whether llama.cpp's graph renormalises the chosen experts' weights.
        default_norm: transformers' ``norm_topk_prob`` when config.json omits it; ``None``
            when the family has no such setting (Mixtral always renormalises).
    """
    n_expert = expert_count(config)
    n_used = int(find(config, EXPERTS_USED_NAMES, 0))
    if n_expert < 2 or not 1 <= n_used <= n_expert:
        raise QuantDeskError(
            f"config.json of this {family} model gives {n_expert} experts with {n_used} used "
            "per token; a mixture of experts needs at least 2, and between 1 and all of them used.",
            "Use the config.json published with the model.")
    if default_norm is not None:
        norm = bool(config.get("norm_topk_prob", default_norm))
        if norm != renormalises:
            raise _refuse(
                f"config.json sets norm_topk_prob={str(norm).lower()}, but llama.cpp's {family} "
                f"graph {'always' if renormalises else 'never'} renormalises the chosen experts' "
                "weights, so the converted model would compute different outputs.")
    step = config.get("decoder_sparse_step", 1) or 1
    if step != 1 or config.get("mlp_only_layers"):
        raise _refuse(
            f"This {family} model mixes dense layers with expert layers (decoder_sparse_step / "
            f"mlp_only_layers), which llama.cpp's {family} graph does not have.")


def expert_width_entries(config: dict, arch: str) -> list:
    """``expert_feed_forward_length`` and ``expert_shared_feed_forward_length`` (Qwen MoEs)."""
    out = []
    if config.get("moe_intermediate_size") is not None:
        out.append(u32(f"{arch}.expert_feed_forward_length", config["moe_intermediate_size"]))
    if config.get("shared_expert_intermediate_size") is not None:
        out.append(u32(f"{arch}.expert_shared_feed_forward_length",
                       config["shared_expert_intermediate_size"]))
    return out


#: Per family: (Q/K/V biases, Q/K norm width: "head", "whole" or None). The rest of a
#: layer is the same in the four families: attention, two norms, router, experts.
_LAYER_EXTRAS = {"qwen2_moe": (True, None), "qwen3_moe": (False, "head"),
                 "mixtral": (False, None), "olmoe": (False, "whole")}


def moe_parameter_counts(config: dict) -> Optional[tuple[int, int]]:
    """``(total, active)`` parameters of a MoE checkpoint from its config.json alone, or
    ``None`` for a dense model or a family not converted here.

    What the Hub page shows before anything is downloaded ("30.5B total, 3.3B active"):
    a token uses every weight but the experts it is not routed to, so ``active`` counts
    ``experts_per_tok / experts`` of the expert matrices. Exact for the checkpoints'
    tensors (the factory's tiny checkpoints check it; Qwen3-30B-A3B: 30,532,122,624).
    """
    text = config.get("text_config", config)
    extras = _LAYER_EXTRAS.get(str(text.get("model_type")))
    n_expert, n_used = expert_count(text), int(find(text, EXPERTS_USED_NAMES, 0))
    if extras is None or n_expert < 2 or not n_used:
        return None
    biases, qk_norm = extras
    hidden, layers = int(text["hidden_size"]), int(text["num_hidden_layers"])
    heads = int(text["num_attention_heads"])
    kv = int(text.get("num_key_value_heads") or heads)
    hd = head_dim(text)
    width = int(text.get("moe_intermediate_size") or text["intermediate_size"])
    shared = int(text.get("shared_expert_intermediate_size") or 0)
    dense = 2 * hidden * heads * hd + 2 * hidden * kv * hd + 2 * hidden + n_expert * hidden
    if biases:
        dense += heads * hd + 2 * kv * hd
    if qk_norm == "head":
        dense += 2 * hd
    elif qk_norm == "whole":
        dense += (heads + kv) * hd
    if shared:
        dense += 3 * hidden * shared + hidden
    experts = 3 * hidden * width * n_expert
    outside = int(text["vocab_size"]) * hidden * (1 if text.get("tie_word_embeddings") else 2) + hidden
    return (layers * (dense + experts) + outside,
            layers * (dense + experts * n_used // n_expert) + outside)
