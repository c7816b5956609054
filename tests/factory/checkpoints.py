"""Write tiny, real-format Hugging Face checkpoints for every supported architecture.

A checkpoint is what a user downloads from the Hub: ``config.json``, safetensors weights
(one file, or shards with ``model.safetensors.index.json``), ``tokenizer.json``,
``tokenizer_config.json`` with a chat template and special tokens, and
``generation_config.json``. Models have a few hundred KB of random weights, so tests can
convert and run them in seconds, and transformers loads them as it loads real models.

Architectures register as :class:`ArchSpec` entries in :data:`ARCHITECTURES`; more
families are added the same way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from tests.factory.safetensors_writer import write_safetensors
from tests.factory.tokenizer import CHATML_SPECIALS, train_bpe_tokenizer
from tests.factory.tokenizer_flavours import (
    GEMMA_TEMPLATE, MISTRAL_TEMPLATE, PHI3_TEMPLATE, TokenizerFiles, write_byte_level_bpe,
    write_sentencepiece)

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


@dataclass(frozen=True)
class ArchSpec:
    """How to write one architecture family's config and weights.

    Attributes:
        model_type: ``config.json``'s ``model_type``.
        hf_class: ``config.json``'s ``architectures[0]``.
        config: Extra config keys for the family (merged over the common ones).
        tensors: Given the finished config, name → shape of every weight.
    """

    model_type: str
    hf_class: str
    config: dict
    tensors: Callable[[dict], dict[str, tuple[int, ...]]]
    #: "chatml-bpe" (Llama-3 split, the default), "qwen2-bpe", "smollm-bpe", or a
    #: SentencePiece style: "llama-spm", "gemma-spm", "phi3-spm" (tests.factory.tokenizer_flavours).
    tokenizer: str = "chatml-bpe"
    chat_template: str = CHATML_TEMPLATE


def _llama_tensors(cfg: dict) -> dict[str, tuple[int, ...]]:
    hidden, inter, vocab = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    head_dim = cfg["head_dim"]
    q_dim = cfg["num_attention_heads"] * head_dim
    kv_dim = cfg["num_key_value_heads"] * head_dim
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab, hidden)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (hidden,),
            p + "self_attn.q_proj.weight": (q_dim, hidden),
            p + "self_attn.k_proj.weight": (kv_dim, hidden),
            p + "self_attn.v_proj.weight": (kv_dim, hidden),
            p + "self_attn.o_proj.weight": (hidden, q_dim),
            p + "post_attention_layernorm.weight": (hidden,),
            p + "mlp.gate_proj.weight": (inter, hidden),
            p + "mlp.up_proj.weight": (inter, hidden),
            p + "mlp.down_proj.weight": (hidden, inter),
        })
    shapes["model.norm.weight"] = (hidden,)
    if not cfg["tie_word_embeddings"]:
        shapes["lm_head.weight"] = (vocab, hidden)
    return shapes


ARCHITECTURES: dict[str, ArchSpec] = {
    "llama": ArchSpec(
        model_type="llama",
        hf_class="LlamaForCausalLM",
        config={"rope_theta": 10000.0, "rms_norm_eps": 1e-5, "hidden_act": "silu",
                "attention_bias": False, "mlp_bias": False, "pretraining_tp": 1},
        tensors=_llama_tensors,
    ),
}


def _qwen2_tensors(cfg: dict) -> dict[str, tuple[int, ...]]:
    shapes = _llama_tensors(cfg)
    hd = cfg["head_dim"]
    for i in range(cfg["num_hidden_layers"]):  # Qwen2 has biases on Q, K and V only
        p = f"model.layers.{i}.self_attn."
        shapes[p + "q_proj.bias"] = (cfg["num_attention_heads"] * hd,)
        shapes[p + "k_proj.bias"] = (cfg["num_key_value_heads"] * hd,)
        shapes[p + "v_proj.bias"] = (cfg["num_key_value_heads"] * hd,)
    return shapes


def _qk_norm_tensors(cfg: dict, base: Callable[[dict], dict]) -> dict[str, tuple[int, ...]]:
    shapes = base(cfg)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}.self_attn."
        shapes[p + "q_norm.weight"] = (cfg["head_dim"],)
        shapes[p + "k_norm.weight"] = (cfg["head_dim"],)
    return shapes


def _gemma_tensors(cfg: dict) -> dict[str, tuple[int, ...]]:
    shapes = _llama_tensors({**cfg, "tie_word_embeddings": True})  # Gemma always ties
    for i in range(cfg["num_hidden_layers"]):  # sandwich norms around attention and MLP
        p = f"model.layers.{i}."
        shapes[p + "pre_feedforward_layernorm.weight"] = (cfg["hidden_size"],)
        shapes[p + "post_feedforward_layernorm.weight"] = (cfg["hidden_size"],)
    return shapes


def _phi3_tensors(cfg: dict) -> dict[str, tuple[int, ...]]:
    hidden, inter, hd = cfg["hidden_size"], cfg["intermediate_size"], cfg["head_dim"]
    qkv = (cfg["num_attention_heads"] + 2 * cfg["num_key_value_heads"]) * hd
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (cfg["vocab_size"], hidden)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (hidden,),
            p + "self_attn.qkv_proj.weight": (qkv, hidden),
            p + "self_attn.o_proj.weight": (hidden, cfg["num_attention_heads"] * hd),
            p + "post_attention_layernorm.weight": (hidden,),
            p + "mlp.gate_up_proj.weight": (2 * inter, hidden),
            p + "mlp.down_proj.weight": (hidden, inter),
        })
    shapes["model.norm.weight"] = (hidden,)
    if not cfg["tie_word_embeddings"]:
        shapes["lm_head.weight"] = (cfg["vocab_size"], hidden)
    return shapes


_LLAMA_CONFIG = ARCHITECTURES["llama"].config
_GEMMA_CONFIG = {"hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
                 "query_pre_attn_scalar": 16, "attention_bias": False, "tie_word_embeddings": True,
                 "sliding_window": 128, "pad_token_id": 0}
def _gemma3_spec(tokenizer: str) -> ArchSpec:
    return ArchSpec("gemma3_text", "Gemma3ForCausalLM", {
        **_GEMMA_CONFIG, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
        "attn_logit_softcapping": None, "final_logit_softcapping": None,
        "layer_types": ["sliding_attention", "full_attention"]},
        lambda c: _qk_norm_tensors(c, _gemma_tensors), tokenizer=tokenizer, chat_template=GEMMA_TEMPLATE)


ARCHITECTURES.update({
    # Llama 3.1-style "llama3" RoPE scaling; a small original context makes every band matter.
    "llama3": ArchSpec("llama", "LlamaForCausalLM", {**_LLAMA_CONFIG, "rope_theta": 500000.0, "rope_scaling": {
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64}}, _llama_tensors),
    "smollm": ArchSpec("llama", "LlamaForCausalLM", _LLAMA_CONFIG, _llama_tensors, tokenizer="smollm-bpe"),
    # SmolVLM's text model: SmolLM with the image markers in its tokenizer.
    "smolvlm": ArchSpec("llama", "LlamaForCausalLM", _LLAMA_CONFIG, _llama_tensors, tokenizer="smolvlm-bpe"),
    "tinyllama": ArchSpec("llama", "LlamaForCausalLM", _LLAMA_CONFIG, _llama_tensors, tokenizer="llama-spm",
                          chat_template=MISTRAL_TEMPLATE),
    "mistral": ArchSpec("mistral", "MistralForCausalLM", {**_LLAMA_CONFIG, "sliding_window": None},
                        _llama_tensors, tokenizer="llama-spm", chat_template=MISTRAL_TEMPLATE),
    "qwen2": ArchSpec("qwen2", "Qwen2ForCausalLM", {"rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
                      "hidden_act": "silu", "use_sliding_window": False, "sliding_window": None},
                      _qwen2_tensors, tokenizer="qwen2-bpe"),
    "qwen3": ArchSpec("qwen3", "Qwen3ForCausalLM", {"rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
                      "hidden_act": "silu", "attention_bias": False, "use_sliding_window": False,
                      "sliding_window": None}, lambda c: _qk_norm_tensors(c, _llama_tensors),
                      tokenizer="qwen2-bpe"),
    # Small soft-caps so that capping changes the logits of these tiny models.
    "gemma2": ArchSpec("gemma2", "Gemma2ForCausalLM", {**_GEMMA_CONFIG, "attn_logit_softcapping": 1.0,
                       "final_logit_softcapping": 2.0}, _gemma_tensors, tokenizer="gemma-spm",
                       chat_template=GEMMA_TEMPLATE),
    "gemma3": _gemma3_spec("gemma-spm"),
    # Gemma 3's text model with the image markers in its tokenizer (the image-text checkpoints').
    "gemma3vl": _gemma3_spec("gemmavl-spm"),
    "phi3": ArchSpec("phi3", "Phi3ForCausalLM", {"rope_theta": 10000.0, "rms_norm_eps": 1e-5,
                     "hidden_act": "silu", "original_max_position_embeddings": 512, "sliding_window": None,
                     "attention_bias": False, "pad_token_id": None}, _phi3_tensors, tokenizer="phi3-spm",
                     chat_template=PHI3_TEMPLATE),
})



def _moe_tensors(cfg: dict, base: Callable[[dict], dict], experts: str = "mlp.experts",
                 router: str = "mlp.gate", leaves=("gate_proj", "up_proj", "down_proj")) -> dict[str, tuple[int, ...]]:
    """``base``'s attention and norms, with each dense MLP replaced by a router over experts
    stored one by one as on the Hub (``<experts>.E.<leaf>.weight``), and Qwen2-MoE's shared
    expert when the config has ``shared_expert_intermediate_size``."""
    shapes = {k: v for k, v in base(cfg).items() if ".mlp." not in k}
    hidden = cfg["hidden_size"]
    n_expert = cfg.get("num_experts") or cfg["num_local_experts"]
    width = cfg.get("moe_intermediate_size") or cfg["intermediate_size"]
    gate, up, down = leaves
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes[p + router + ".weight"] = (n_expert, hidden)
        for e in range(n_expert):
            q = f"{p}{experts}.{e}."
            shapes.update({q + f"{gate}.weight": (width, hidden), q + f"{up}.weight": (width, hidden),
                           q + f"{down}.weight": (hidden, width)})
        shared = cfg.get("shared_expert_intermediate_size")
        if shared:
            q = p + "mlp.shared_expert."
            shapes.update({q + "gate_proj.weight": (shared, hidden), q + "up_proj.weight": (shared, hidden),
                           q + "down_proj.weight": (hidden, shared), p + "mlp.shared_expert_gate.weight": (1, hidden)})
    return shapes


def _olmoe_tensors(cfg: dict) -> dict[str, tuple[int, ...]]:
    shapes = _moe_tensors(cfg, _llama_tensors)
    for i in range(cfg["num_hidden_layers"]):  # Q/K norms over all heads at once
        p = f"model.layers.{i}.self_attn."
        shapes[p + "q_norm.weight"] = (cfg["num_attention_heads"] * cfg["head_dim"],)
        shapes[p + "k_norm.weight"] = (cfg["num_key_value_heads"] * cfg["head_dim"],)
    return shapes


# Four small experts, two used per token: routing matters and every expert is reachable.
_QWEN_MOE_CONFIG = {"rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "hidden_act": "silu",
                    "use_sliding_window": False, "sliding_window": None, "num_experts": 4,
                    "num_experts_per_tok": 2, "moe_intermediate_size": 32, "decoder_sparse_step": 1,
                    "mlp_only_layers": [], "output_router_logits": False, "router_aux_loss_coef": 0.001}
ARCHITECTURES.update({
    "qwen2_moe": ArchSpec("qwen2_moe", "Qwen2MoeForCausalLM", {
        **_QWEN_MOE_CONFIG, "shared_expert_intermediate_size": 96, "norm_topk_prob": False,
        "qkv_bias": True}, lambda c: _moe_tensors(c, _qwen2_tensors), tokenizer="qwen2-bpe"),
    "qwen3_moe": ArchSpec("qwen3_moe", "Qwen3MoeForCausalLM", {
        **_QWEN_MOE_CONFIG, "norm_topk_prob": True, "attention_bias": False},
        lambda c: _moe_tensors(c, lambda c2: _qk_norm_tensors(c2, _llama_tensors)), tokenizer="qwen2-bpe"),
    "mixtral": ArchSpec("mixtral", "MixtralForCausalLM", {
        **_LLAMA_CONFIG, "rope_theta": 1000000.0, "sliding_window": None, "num_local_experts": 4,
        "num_experts_per_tok": 2, "intermediate_size": 48, "output_router_logits": False,
        "router_jitter_noise": 0.0},
        lambda c: _moe_tensors(c, _llama_tensors, "block_sparse_moe.experts", "block_sparse_moe.gate",
                               ("w1", "w3", "w2")),
        tokenizer="llama-spm", chat_template=MISTRAL_TEMPLATE),
    "olmoe": ArchSpec("olmoe", "OlmoeForCausalLM", {
        "rope_theta": 10000.0, "rms_norm_eps": 1e-5, "hidden_act": "silu", "num_key_value_heads": 4,
        "num_experts": 4, "num_experts_per_tok": 2, "intermediate_size": 32, "norm_topk_prob": False,
        "clip_qkv": None, "attention_bias": False, "output_router_logits": False}, _olmoe_tensors),
})

#: The mixture-of-experts entries of :data:`ARCHITECTURES`.
MOE_ARCHITECTURES = ("qwen2_moe", "qwen3_moe", "mixtral", "olmoe")

#: config.json of Qwen/Qwen3-30B-A3B (the keys that size it): 30,532,122,624 parameters by
#: the Hub's count, 128 experts of which 8 per token.
QWEN3_30B_A3B_CONFIG = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
    "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
    "vocab_size": 151936, "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768,
    "intermediate_size": 6144, "tie_word_embeddings": False}


@dataclass
class TinyCheckpoint:
    """What the factory wrote, for tests to assert against."""

    path: Path
    arch: str
    dtype: str
    config: dict
    tensor_shapes: dict[str, tuple[int, ...]]
    weight_files: list[Path] = field(default_factory=list)


def _weights(shapes: dict[str, tuple[int, ...]], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in shapes.items():
        if len(shape) == 1:  # norms scale activations: keep them near 1
            out[name] = (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
        else:
            out[name] = (rng.standard_normal(shape) * 0.08).astype(np.float32)
    return out


def _write_chatml_tokenizer_config(dest: Path, ids: dict[str, int], config: dict) -> None:
    """tokenizer_config.json and special_tokens_map.json of the default ChatML BPE."""
    (dest / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|im_start|>",
        "eos_token": "<|im_end|>",
        "unk_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": config["max_position_embeddings"],
        "chat_template": CHATML_TEMPLATE,
        "added_tokens_decoder": {
            str(i): {"content": tok, "special": True, "normalized": False,
                     "lstrip": False, "rstrip": False, "single_word": False}
            for tok, i in ids.items()
        },
    }, indent=2))
    (dest / "special_tokens_map.json").write_text(json.dumps({
        "bos_token": "<|im_start|>", "eos_token": "<|im_end|>",
        "unk_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
    }, indent=2))



def _finish_tokenizer_config(dest: Path, chat_template: str) -> None:
    """Add the family's chat template to the tokenizer_config.json a flavour wrote."""
    path = dest / "tokenizer_config.json"
    data = json.loads(path.read_text())
    data["chat_template"] = chat_template
    path.write_text(json.dumps(data, indent=2))


def write_flavour(dest: Path, flavour: str, vocab_size: int) -> TokenizerFiles:
    """Write the tokenizer files of a non-default ``ArchSpec.tokenizer`` flavour.

    BPE flavours train to ``vocab_size``; SentencePiece ones to 600 pieces (they need room
    for the byte-fallback pieces and the corpus's characters).
    """
    kind, _, style = flavour.partition("-")
    if style == "bpe":
        return write_byte_level_bpe(dest, kind, vocab_size, 512)
    return write_sentencepiece(dest, kind, 512)


def write_tiny_checkpoint(
    dest: Path,
    arch: str = "llama",
    dtype: str = "float32",
    shards: int = 1,
    tie_word_embeddings: bool = False,
    seed: int = 0,
    vocab_size: int = 384,
    config_overrides: Optional[dict] = None,
) -> TinyCheckpoint:
    """Write a tiny checkpoint of ``arch`` into ``dest`` (created if needed).

    Args:
        dest: Folder to write into.
        arch: A key of :data:`ARCHITECTURES`.
        dtype: ``float32``, ``float16`` or ``bfloat16`` — the safetensors storage type.
        shards: Number of safetensors files; more than one writes an index too.
        tie_word_embeddings: Share the embedding matrix with the output head.
        seed: Seed of the random weights.
        vocab_size: Target size of the trained BPE vocabulary.
        config_overrides: Keys replacing the defaults in ``config.json``.
    """
    spec = ARCHITECTURES[arch]
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)

    if spec.tokenizer == "chatml-bpe":
        tokenizer = train_bpe_tokenizer(vocab_size)
        tokenizer.save(str(dest / "tokenizer.json"))
        vocab = tokenizer.get_vocab_size(with_added_tokens=True)
        ids = {tok: tokenizer.token_to_id(tok) for tok in CHATML_SPECIALS}
        flavour = None
    else:
        flavour = write_flavour(dest, spec.tokenizer, vocab_size)
        vocab, ids = flavour.vocab_size, flavour.ids

    config = {
        "architectures": [spec.hf_class],
        "model_type": spec.model_type,
        "vocab_size": vocab,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "max_position_embeddings": 512,
        "initializer_range": 0.02,
        "tie_word_embeddings": tie_word_embeddings,
        "bos_token_id": ids[flavour.bos] if flavour and flavour.bos else ids["<|im_start|>"],
        "eos_token_id": ids[flavour.eos] if flavour else ids["<|im_end|>"],
        "torch_dtype": dtype,
        "use_cache": True,
        **spec.config,
        **(config_overrides or {}),
    }
    (dest / "config.json").write_text(json.dumps(config, indent=2))
    (dest / "generation_config.json").write_text(json.dumps({
        "bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"],
    }, indent=2))
    if flavour is not None:
        _finish_tokenizer_config(dest, spec.chat_template)
    else:
        _write_chatml_tokenizer_config(dest, ids, config)

    shapes = spec.tensors(config)
    files = write_weights(dest, _weights(shapes, seed), dtype, shards)
    return TinyCheckpoint(dest, arch, dtype, config, shapes, files)


def write_weights(dest: Path, weights: dict[str, np.ndarray], dtype: str, shards: int) -> list[Path]:
    """``model.safetensors``, or ``shards`` files and their index; the files written."""
    names = list(weights)
    files: list[Path] = []
    if shards <= 1:
        files.append(dest / "model.safetensors")
        write_safetensors(files[0], weights, dtype)
        return files
    weight_map, total = {}, 0
    for n, group in enumerate(np.array_split(np.arange(len(names)), shards), start=1):
        file = dest / f"model-{n:05d}-of-{shards:05d}.safetensors"
        part = {names[i]: weights[names[i]] for i in group}
        total += write_safetensors(file, part, dtype)
        weight_map.update({name: file.name for name in part})
        files.append(file)
    (dest / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    return files
