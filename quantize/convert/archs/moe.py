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

from app.core.errors import QuantDeskError
from quantize.convert.archs.hparams import EXPERTS_USED_NAMES, expert_count, find, u32


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
