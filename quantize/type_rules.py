"""Which GGML type each tensor gets: llama.cpp's per-tensor rules, reproduced.

``llama-quantize`` does not write every weight in the file type's default type. In
``src/llama-quant.cpp`` (``tensor_allows_quantization``, ``llama_tensor_get_type`` and
``llama_tensor_get_type_impl``, ``tensor_type_fallback``) it

* leaves some tensors alone: 1-D tensors, norms, names not ending in ``weight``, MoE
  router gates, position embeddings, small conv/RWKV/multimodal tensors;
* gives the output head (and a tied token embedding) ``Q6_K``, ``attn_v`` / ``ffn_down``
  more bits in chosen layers (``use_more_bits``: the first and last eighth and every
  third layer between), with extra bumps for grouped-query attention, 8-expert MoE
  models and 70B Llamas;
* falls back to a 32-block type (or F16) when a row is not a multiple of the block.

The rules depend on the order in which llama.cpp visits tensors (``attn_v`` counts its
position), so :class:`TensorTypeChooser` must be fed tensors in that order — see
:func:`quantize.plan.llama_tensor_order`. Every file type of
:data:`quantize.ftypes.FILE_TYPES` is handled, the i-quant mixes (``IQ2_M``,
``IQ3_M`` ...), the ternary types and ``MXFP4_MOE`` included; some of their choices
depend on whether an importance matrix is given (``has_imatrix``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum, auto
from typing import Optional, Sequence

from quantize.ggml_types import GGML_QUANT_SIZES
from quantize.ggml_types import GGMLQuantizationType as T

from models.foundation.errors import QuantDeskError
from quantize.ftypes import FileType, is_quantized_type


class Category(Enum):
    """llama.cpp's ``tensor_category``: broad roles found by substring, not by exact name."""

    TOKEN_EMBD = auto()
    ATTENTION_Q = auto()
    ATTENTION_V = auto()
    ATTENTION_K = auto()
    ATTENTION_QKV = auto()
    ATTENTION_KV_B = auto()
    ATTENTION_OUTPUT = auto()
    FFN_UP = auto()
    FFN_GATE = auto()
    FFN_DOWN = auto()
    OUTPUT = auto()
    OTHER = auto()


# Checked in this order, as llama.cpp does: "attn_qkv.weight" must win over "attn_v.weight".
_SUBSTRING_CATEGORIES = (
    ("attn_qkv.weight", Category.ATTENTION_QKV),
    ("attn_kv_b.weight", Category.ATTENTION_KV_B),
    ("attn_v.weight", Category.ATTENTION_V),
    ("attn_k.weight", Category.ATTENTION_K),
    ("attn_q.weight", Category.ATTENTION_Q),
    ("attn_output.weight", Category.ATTENTION_OUTPUT),
    ("ffn_up", Category.FFN_UP),
    ("ffn_gate", Category.FFN_GATE),
    ("ffn_down", Category.FFN_DOWN),
)
_ATTN_V_LIKE = (Category.ATTENTION_V, Category.ATTENTION_QKV, Category.ATTENTION_KV_B)
_TOKEN_EMBD_NAMES = ("token_embd.weight", "per_layer_token_embd.weight")

# Substrings that keep a tensor in its stored type (tensor_allows_quantization).
_NEVER_QUANTIZED = (
    "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel",
    "per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight",
    "indexer.k_proj.weight", "indexer.q_proj.weight",
    "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight", "time_mix_w2.weight",
    "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight", "time_mix_a0.weight",
    "time_mix_a1.weight", "time_mix_a2.weight", "time_mix_g1.weight", "time_mix_g2.weight",
    "time_mix_decay_w1.weight", "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight",
    "attn_rel_b.weight", ".position_embd", "sam.pos_embd", "sam.neck.", "sam.net_", ".rel_pos",
    ".patch_embd", ".patch_merger", "a.rvq.codebook", "mm.a.code_embd",
)
_NEVER_QUANTIZED_GLM5_NEXT = (
    "hc_", "indexer.attn_q_b", "indexer.attn_k", "indexer.proj", "indexer_compressor_gate",
    "indexer_compressor_ape", "ssm_f_a.weight", "ssm_f_b.weight", "ssm_g_a.weight",
    "ssm_g_b.weight", "ssm_beta.weight", "attn_kv_a_mqa.weight", "attn_k_b.weight",
    "attn_v_b.weight",
)
_EXACT_NEVER_QUANTIZED = ("position_embd.weight", "token_types.weight")

# tensor_type_fallback: a 256-block type whose rows do not fit -> a 32-block type.
_FALLBACK = {T.Q2_K: T.Q4_0, T.Q3_K: T.Q4_0, T.Q4_K: T.Q5_0, T.Q5_K: T.Q5_1, T.Q6_K: T.Q8_0,
             T.TQ1_0: T.Q4_0, T.TQ2_0: T.Q4_0,
             **{t: T.IQ4_NL for t in (T.IQ1_S, T.IQ1_M, T.IQ2_XXS, T.IQ2_XS, T.IQ2_S, T.IQ3_XXS,
                                      T.IQ3_S, T.IQ4_XS)}}

# The 1- and 2-bit file types, which share one branch of llama_tensor_get_type_impl.
_IQ2_MIXES = ("IQ2_XXS", "IQ2_XS", "IQ1_S", "IQ2_S", "IQ2_M", "IQ1_M")
# An untied token embedding's type in the file types that do not keep the default.
_TOKEN_EMBD_TYPE = {"IQ2_XXS": T.Q2_K, "IQ2_XS": T.Q2_K, "IQ1_S": T.Q2_K, "IQ1_M": T.Q2_K,
                    "IQ2_S": T.IQ3_S, "IQ2_M": T.IQ3_S, "IQ3_XXS": T.IQ3_S,
                    "TQ1_0": T.Q4_K, "TQ2_0": T.Q4_K}
_ATTN_OUTPUT_Q5_K_WITH_8_EXPERTS = ("Q2_K", "IQ3_XS", "IQ3_XXS", "Q3_K_S", "Q3_K_M", "IQ4_NL",
                                    "Q4_K_S", "Q4_K_M", "IQ3_S", "IQ3_M", "IQ4_XS")

_LAYER = re.compile(r"blk\.\s*([+-]?[0-9]+)")  # sscanf("blk.%d."): skips spaces, needs no dot after


def block_size(qtype: T) -> int:
    """``ggml_blck_size``: values per block (1 for plain float types)."""
    return GGML_QUANT_SIZES[qtype][0]


def ggml_ne(shape: Sequence[int]) -> tuple[int, int, int, int]:
    """GGML's ``ne[0..3]`` (row first) from a numpy-order shape."""
    ne = [int(d) for d in reversed(shape)] + [1, 1, 1, 1]
    return ne[0], ne[1], ne[2], ne[3]


def ggml_n_dims(shape: Sequence[int]) -> int:
    """``ggml_n_dims``: trailing dimensions of size 1 do not count (a (1, n) tensor is 1-D)."""
    ne = ggml_ne(shape)
    for i in (3, 2, 1):
        if ne[i] > 1:
            return i + 1
    return 1


def layer_index(name: str) -> Optional[int]:
    """The ``N`` of ``blk.N.``, as ``sscanf(name, "blk.%d.")`` reads it, else ``None``."""
    m = _LAYER.match(name)
    return int(m.group(1)) if m else None


def tensor_category(name: str) -> Category:
    """``tensor_get_category``: the role of a tensor, from its name."""
    if name == "output.weight":
        return Category.OUTPUT
    if name in _TOKEN_EMBD_NAMES:
        return Category.TOKEN_EMBD
    for needle, category in _SUBSTRING_CATEGORIES:
        if needle in name:
            return category
    return Category.OTHER


def allows_quantization(name: str, shape: Sequence[int], arch: str) -> bool:
    """``tensor_allows_quantization`` with llama-quantize's defaults (output quantized)."""
    if ggml_n_dims(shape) < 2 or not name.endswith("weight"):
        return False
    if name in _EXACT_NEVER_QUANTIZED or any(s in name for s in _NEVER_QUANTIZED):
        return False
    if arch == "glm5-next" and any(s in name for s in _NEVER_QUANTIZED_GLM5_NEXT):
        return False
    return True


def use_more_bits(i_layer: int, n_layers: int) -> bool:
    """The layers llama.cpp favours: first and last eighth, and every third one between."""
    return i_layer < n_layers // 8 or i_layer >= 7 * n_layers // 8 or (i_layer - n_layers // 8) % 3 == 2


@dataclass(frozen=True)
class ModelHParams:
    """The hyper-parameters the rules read (``llama_hparams`` after ``load_hparams``).

    Attributes:
        arch: ``general.architecture``.
        n_layer_all: ``{arch}.block_count`` (includes next-token-prediction layers).
        n_layer_nextn: ``{arch}.nextn_predict_layers`` (0 when absent).
        n_head: Attention heads of layer 0 (``{arch}.attention.head_count``).
        n_head_kv: KV heads of layer 0; defaults to ``n_head``.
        n_expert: ``{arch}.expert_count`` (0 for dense models).
    """

    arch: str
    n_layer_all: int
    n_layer_nextn: int = 0
    n_head: int = 0
    n_head_kv: int = 0
    n_expert: int = 0

    @property
    def n_gqa(self) -> int:
        """Query heads per KV head (0 when the model has no KV heads)."""
        return self.n_head // self.n_head_kv if self.n_head_kv else 0

    @property
    def is_70b(self) -> bool:
        """Whether llama.cpp classifies the model as ``LLM_TYPE_70B`` (an ``attn_v`` bump)."""
        n_layer = self.n_layer_all - self.n_layer_nextn
        if self.arch in ("llama", "llama-embed"):
            return self.n_expert != 8 and n_layer == 80 and self.n_head != self.n_head_kv
        if self.arch in ("qwen2", "deci", "olmo"):
            return n_layer == 80
        return self.arch == "jais2" and n_layer == 68


@dataclass(frozen=True)
class TypeOverrides:
    """llama-quantize's options that change the per-tensor choice.

    Attributes:
        pure: ``--pure``: every quantizable tensor gets the default type (fallbacks still apply).
        output_tensor_type: ``--output-tensor-type``: the type of ``output.weight``.
        token_embedding_type: ``--token-embedding-type``: the type of ``token_embd.weight``.
    """

    pure: bool = False
    output_tensor_type: Optional[T] = None
    token_embedding_type: Optional[T] = None


@dataclass
class TensorTypeChooser:
    """``llama_tensor_get_type`` with its running counters, for one file type.

    Build it with every tensor name of the model (in llama.cpp's order), then call
    :meth:`choose` once per tensor, in that same order.
    """

    file_type: FileType
    hparams: ModelHParams
    all_names: Sequence[str]
    overrides: TypeOverrides = field(default_factory=TypeOverrides)
    has_imatrix: bool = False
    #: ``(tensor name, wanted type, type used)`` for each row-width fallback.
    fallbacks: list[tuple[str, T, T]] = field(default_factory=list)

    def __post_init__(self) -> None:
        categories = [tensor_category(n) for n in self.all_names]
        self._n_attention_wv = sum(c in _ATTN_V_LIKE for c in categories)
        self._tied_embeddings = Category.OUTPUT not in categories
        self._i_attention_wv = self._i_ffn_down = self._i_ffn_gate = self._i_ffn_up = 0

    def choose(self, name: str, shape: Sequence[int], stored_type: T) -> T:
        """The type ``name`` is written as; ``stored_type`` when it is not quantized at all."""
        if not allows_quantization(name, shape, self.hparams.arch):
            return stored_type
        category = tensor_category(name)
        ov = self.overrides
        if ov.token_embedding_type is not None and category == Category.TOKEN_EMBD:
            return ov.token_embedding_type
        if ov.output_tensor_type is not None and category == Category.OUTPUT:
            return ov.output_tensor_type
        new_type = self.file_type.default_type
        if is_quantized_type(new_type):
            if not ov.pure:
                new_type = self._mixture_type(new_type, name, shape, category)
            new_type = self._fallback(name, shape, new_type)
        return new_type

    # -- llama_tensor_get_type_impl ------------------------------------------------------

    def _layer_info(self, counter: int, name: str) -> tuple[int, int]:
        # MoE experts are not stored consecutively, so the layer comes from the name.
        n_layer = self.hparams.n_layer_all
        if max(1, self.hparams.n_expert) > 1:
            i_layer = layer_index(name)
            if i_layer is None:
                raise QuantDeskError(f"Cannot tell which layer the tensor {name} belongs to.",
                                     "The model file's tensor names are not the ones llama.cpp expects.")
            if not 0 <= i_layer < n_layer:
                raise QuantDeskError(f"The tensor {name} names layer {i_layer}, but the model has {n_layer} layers.",
                                     "The model file is inconsistent; convert it again.")
            return i_layer, n_layer
        return counter, n_layer

    def _mixture_type(self, new_type: T, name: str, shape: Sequence[int], category: Category) -> T:
        ft = self.file_type.name
        hp = self.hparams
        if hp.arch == "glm5-next" and any(s in name for s in ("attn_q_a", "attn_q_b", "nextn.eh_proj")):
            if new_type not in (T.F32, T.BF16, T.F16):
                return T.Q8_0
        if category == Category.OUTPUT or (self._tied_embeddings and category == Category.TOKEN_EMBD):
            return self._output_type(new_type, shape)
        if ft == "MXFP4_MOE":
            # expert tensors (a third dimension) -> MXFP4, everything else -> Q8_0
            experts = category in (Category.FFN_UP, Category.FFN_GATE, Category.FFN_DOWN)
            if ggml_ne(shape)[2] > 1 and (hp.arch != "bailingmoe3" or experts):
                return T.MXFP4
            return T.Q8_0
        if category == Category.TOKEN_EMBD:
            if self.overrides.token_embedding_type is not None:
                return self.overrides.token_embedding_type
            return _TOKEN_EMBD_TYPE.get(ft, new_type)
        if ft in _IQ2_MIXES:
            return self._iq2_mix_type(new_type, category)
        if category in _ATTN_V_LIKE:
            new_type = self._attn_v_type(new_type)
            self._i_attention_wv += 1
        elif category == Category.ATTENTION_K:
            if hp.n_expert == 8:
                new_type = T.Q8_0
            else:
                new_type = {"IQ3_XS": T.IQ3_XXS, "IQ3_XXS": T.IQ2_S}.get(ft, new_type)
        elif category == Category.ATTENTION_Q:
            new_type = {"IQ3_XS": T.IQ3_XXS, "IQ3_XXS": T.IQ2_S}.get(ft, new_type)
        elif category == Category.FFN_DOWN:
            i, n = self._layer_info(self._i_ffn_down, name)
            new_type = self._ffn_down_type(new_type, i, n)
            self._i_ffn_down += 1
        elif category == Category.ATTENTION_OUTPUT:
            if hp.arch == "falcon":
                if ft == "Q3_K_L":
                    new_type = T.Q4_K
            elif hp.n_expert == 8:
                if ft in _ATTN_OUTPUT_Q5_K_WITH_8_EXPERTS:
                    new_type = T.Q5_K
            else:
                new_type = {"Q2_K": T.Q3_K, "IQ3_XXS": T.IQ3_S, "Q3_K_M": T.Q4_K, "Q3_K_L": T.Q5_K,
                            "IQ3_M": T.Q4_K}.get(ft, new_type)
        elif category in (Category.FFN_GATE, Category.FFN_UP):
            gate = category == Category.FFN_GATE
            i, n = self._layer_info(self._i_ffn_gate if gate else self._i_ffn_up, name)
            if ft == "IQ3_XS" and n // 8 <= i < 7 * n // 8:
                new_type = T.IQ3_XXS
            if gate:
                self._i_ffn_gate += 1
            else:
                self._i_ffn_up += 1
        return new_type

    def _output_type(self, new_type: T, shape: Sequence[int]) -> T:
        """The output head (and a tied token embedding)."""
        ft = self.file_type.name
        if self.overrides.output_tensor_type is not None:
            return self.overrides.output_tensor_type
        if ft == "MXFP4_MOE":
            return T.Q8_0
        if self.hparams.arch == "falcon" or ggml_ne(shape)[0] % block_size(new_type):
            return T.Q8_0
        if ft in _IQ2_MIXES or ft == "IQ3_XXS":
            return T.Q5_K
        return new_type if new_type == T.Q8_0 else T.Q6_K

    def _iq2_mix_type(self, new_type: T, category: Category) -> T:
        """The 1- and 2-bit mixes: a few more bits where the error costs most."""
        ft = self.file_type.name
        hp = self.hparams
        wider = T.IQ3_S if ft in ("IQ2_S", "IQ2_M") else T.Q2_K
        if category in _ATTN_V_LIKE:
            self._i_attention_wv += 1
            return T.Q4_K if hp.n_gqa >= 4 or hp.n_expert >= 4 else wider
        if hp.n_expert == 8 and category == Category.ATTENTION_K:
            return T.Q4_K
        if category == Category.FFN_DOWN:
            # a running count, even for MoE models (llama.cpp reads no layer from the name here)
            first_eighth = self._i_ffn_down < hp.n_layer_all // 8
            self._i_ffn_down += 1
            return wider if first_eighth else new_type
        if category == Category.ATTENTION_OUTPUT:
            if hp.n_expert == 8:
                return T.Q5_K
            if ft in ("IQ1_S", "IQ1_M"):
                return T.IQ2_XXS
            if ft in ("IQ2_S", "IQ2_M"):
                return T.IQ3_S
        return new_type

    def _attn_v_type(self, new_type: T) -> T:
        ft = self.file_type.name
        hp = self.hparams
        i, n = self._i_attention_wv, self._n_attention_wv
        if ft == "Q2_K":
            new_type = T.Q4_K if hp.n_gqa >= 4 else T.Q3_K
        elif ft == "Q2_K_S" and hp.n_gqa >= 4:
            new_type = T.Q4_K
        elif ft == "IQ3_XXS":
            new_type = T.Q4_K if hp.n_gqa >= 4 else T.IQ3_XXS if self.has_imatrix else T.IQ3_S
        elif ft in ("IQ3_XS", "IQ3_S") and hp.n_gqa >= 4:
            new_type = T.Q4_K
        elif ft == "IQ3_M":
            new_type = T.Q4_K
        elif ft == "Q3_K_M":
            new_type = T.Q5_K if i < 2 else T.Q4_K
        elif ft == "Q3_K_L":
            new_type = T.Q5_K
        elif ft in ("IQ4_NL", "IQ4_XS") and hp.n_gqa >= 4:
            new_type = T.Q5_K
        elif ft in ("Q4_K_M", "Q5_K_M") and use_more_bits(i, n):
            new_type = T.Q6_K
        elif ft == "Q4_K_S" and i < 4:
            new_type = T.Q5_K
        if hp.is_70b and new_type in (T.Q3_K, T.Q4_K):
            new_type = T.Q5_K  # 8 heads share attn_v: more bits cost little
        if hp.n_expert == 8:
            new_type = T.Q8_0
        return new_type

    def _ffn_down_type(self, new_type: T, i: int, n: int) -> T:
        ft = self.file_type.name
        falcon = self.hparams.arch == "falcon"
        if ft == "Q2_K":
            return T.Q3_K
        if ft == "Q2_K_S":
            return T.Q4_K if i < n // 8 else new_type
        if ft == "IQ3_XXS" and not self.has_imatrix:
            return T.Q4_K if i < n // 8 else T.Q3_K
        if ft == "Q3_K_M":
            if i < n // 16:
                return T.Q5_K
            return T.Q4_K if not falcon or use_more_bits(i, n) else T.Q3_K
        if ft == "IQ3_M" and (i < n // 8 or (self.hparams.n_expert == 8 and use_more_bits(i, n))):
            return T.Q4_K
        if ft == "Q3_K_L":
            return T.Q4_K if falcon else T.Q5_K
        if ft == "Q4_K_M":
            if falcon:
                return T.Q6_K if i < n // 16 else T.Q5_K if use_more_bits(i, n) else T.Q4_K
            return T.Q6_K if use_more_bits(i, n) else new_type
        if ft in ("IQ4_NL", "IQ4_XS") and i < n // 8 and not self.has_imatrix:
            return T.Q5_K
        if ft == "Q5_K_M" and use_more_bits(i, n):
            return T.Q6_K
        if ft == "Q4_K_S" and not falcon and i < n // 8:
            return T.Q5_K
        if ft in ("Q4_0", "Q5_0") and self.has_imatrix and i < n // 8:
            # only with an imatrix, so that a plain Q4_0 stays what it always was
            return T.Q4_1 if ft == "Q4_0" else T.Q5_1
        return new_type

    def _fallback(self, name: str, shape: Sequence[int], target: T) -> T:
        ncols = ggml_ne(shape)[0]
        if ncols % block_size(target) == 0:
            return target
        if target in _FALLBACK:
            chosen = _FALLBACK[target]
        elif block_size(target) <= 32:
            chosen = target  # already a 32-block type: only F16 is left
        else:
            raise QuantDeskError(f"No fallback type is defined for {target.name} (tensor {name}).")
        if ncols % block_size(chosen):
            chosen = T.F16  # rows not even a multiple of 32
        self.fallbacks.append((name, target, chosen))
        return chosen
