"""A Hugging Face safetensors folder as a :class:`~quantize.source.TensorSource`.

``open_hf_folder(path)`` checks the folder (config, weights, tokenizer), picks the
architecture family, and builds the GGUF metadata and the list of output tensors without
reading any weights. Each :class:`~quantize.source.SourceTensor`'s ``load()`` reads one
tensor from its memory-mapped shard and applies the family's rewrites, so a converter or
quantizer streaming through the list holds one tensor at a time. A mixture-of-experts
layer's experts become one tensor per projection: ``load()`` stacks expert E's matrix as
slice E (llama.cpp's ``ffn_{gate,up,down}_exps``), reading the experts one by one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

import numpy as np
from quantize.ggml_types import GGMLQuantizationType

from models.foundation.errors import QuantDeskError
from quantize.convert.archs import IGNORED_SUFFIXES, Architecture, find_architecture
from quantize.convert.archs.hparams import expert_count, text_model_entries
from quantize.convert.general_info import general_entries
from quantize.convert.hf_folder import HFFolder
from quantize.convert.pretokenizer import identify_pre_tokenizer
from quantize.convert.safetensors_reader import TensorRecord
from quantize.convert.special_tokens import tokenizer_entries
from quantize.convert.tensor_checks import check_tensors
from quantize.convert.vocab import Vocab, added_token_maps, bpe_vocab, spm_vocab
from quantize.source import MetadataEntry, SourceTensor

STORED_TYPES = {"F32": GGMLQuantizationType.F32, "F16": GGMLQuantizationType.F16,
                "BF16": GGMLQuantizationType.BF16}


def permute_qk_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """HF's half-split RoPE row order → llama.cpp's interleaved order, per head.

    Within each head HF keeps the rows rotated together as ``[x0..x(d/2-1) | y0..y(d/2-1)]``;
    llama.cpp's ``llama`` graph wants ``[x0 y0 x1 y1 ...]``. Viewing the rows as
    ``(head, half, d/2)`` and swapping the last two axes interleaves them.
    """
    rows = w.shape[0]
    return (w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def load_vocab(folder: HFFolder, arch: Architecture, pre_tokenizer: Optional[str]) -> Vocab:
    """The family's vocabulary: SentencePiece when it ships tokenizer.model, else BPE."""
    vocab_size = folder.config.get("vocab_size")
    use_spm = arch.tokenizer == "spm" or (arch.tokenizer == "auto" and folder.has("tokenizer.model"))
    if use_spm:
        if not folder.has("tokenizer.model"):
            raise QuantDeskError(f"{folder.path.name} has no tokenizer.model, which this model "
                                 "family's SentencePiece tokenizer needs.",
                                 "Download tokenizer.model from the model's page too.")
        return spm_vocab(folder.path / "tokenizer.model", vocab_size, added_token_maps(folder))
    if not folder.has("tokenizer.json"):
        raise QuantDeskError(f"{folder.path.name} has neither tokenizer.json nor tokenizer.model.",
                             "Download the model's tokenizer files too.")
    tokenizer_json = folder.json("tokenizer.json")
    pre = identify_pre_tokenizer(folder.path / "tokenizer.json", pre_tokenizer, tokenizer_json)
    return bpe_vocab(tokenizer_json, vocab_size, pre)


class HFSource:
    """A checked HF folder, exposed as GGUF metadata plus lazily loaded tensors.

    Use :func:`open_hf_folder` to make one; :meth:`close` (or ``with``) releases the maps.
    """

    def __init__(self, path: Path, pre_tokenizer: Optional[str] = None) -> None:
        self.folder = HFFolder(path)
        try:
            self.description = str(self.folder.path)
            self.hf_class, self.family = find_architecture(self.folder.config, self.folder.path.name)
            self.config = self.family.complete_config(self.folder.config)
            self.arch = self.family.gguf_arch
            check_tensors(self.folder.tensors, self.config, self.folder.path.name,
                          qk_norm_whole=self.family.qk_norm_whole)
            self.vocab = load_vocab(self.folder, self.family, pre_tokenizer)
            self._tensors = self._plan_tensors()
        except BaseException:
            self.folder.close()
            raise

    # TensorSource -------------------------------------------------------------------
    def metadata(self) -> list[MetadataEntry]:
        n_params = sum(int(np.prod(r.shape, dtype=np.int64)) for r in self.folder.tensors.values())
        out = general_entries(self.folder.path.name, n_params, self.folder.text("README.md"),
                              self.folder.json("generation_config.json"))
        out += text_model_entries(self.config, self.arch)
        if self.family.metadata is not None:
            out += self.family.metadata(self.config, self.arch)
        out += tokenizer_entries(self.vocab, self.folder, self.config, self.family.add_space_prefix)
        return out

    def tensors(self) -> list[SourceTensor]:
        return list(self._tensors)

    # ---------------------------------------------------------------------------------
    def _plan_tensors(self) -> list[SourceTensor]:
        out: list[SourceTensor] = []
        if self.family.extra_tensors is not None:
            for name, values in self.family.extra_tensors(self.config):
                out.append(SourceTensor(name, values.shape, GGMLQuantizationType.F32,
                                        lambda v=values: v.copy()))
        experts: dict[str, dict[int, TensorRecord]] = {}
        for hf_name, record in self.folder.tensors.items():
            if hf_name.endswith(IGNORED_SUFFIXES) or hf_name in self.family.dropped:
                continue
            slot = self.family.experts.slot(hf_name) if self.family.experts else None
            if slot is not None:
                merged, index = slot
                if merged not in experts:
                    experts[merged] = {}
                    out.append(merged)  # type: ignore[arg-type]  # placeholder, keeps file order
                experts[merged][index] = record
                continue
            gguf_name = self.family.gguf_name(hf_name)
            if gguf_name is None:
                raise QuantDeskError(
                    f"{record.file.path.name} holds tensor {hf_name}, which QuantDesk does not "
                    f"know how to place in a {self.hf_class} model.",
                    "The checkpoint may be a variant QuantDesk does not support yet.")
            shape = tuple(record.shape)
            if gguf_name == "token_embd.weight":
                shape = self._embedding_shape(shape, record)
            out.append(SourceTensor(gguf_name, shape, STORED_TYPES.get(record.dtype, GGMLQuantizationType.F32),
                                    *self._loaders(hf_name, record, shape)))
        return [self._merged_experts(t, experts[t]) if isinstance(t, str) else t for t in out]

    def _merged_experts(self, gguf_name: str, by_index: dict[int, TensorRecord]) -> SourceTensor:
        """One layer's experts of one projection as a (n_expert, rows, cols) tensor."""
        n_expert = expert_count(self.config)
        records = [by_index.get(i) for i in range(n_expert)]
        first = next(iter(by_index.values()))
        if None in records or len(by_index) != n_expert:
            missing = [i for i, r in enumerate(records) if r is None]
            raise QuantDeskError(
                f"{self.folder.path.name} has {len(by_index)} experts for {gguf_name}, but "
                f"config.json says each layer has {n_expert}"
                + (f" (expert {missing[0]} is missing)." if missing else "."),
                "A weight shard is probably missing or incomplete; download the model again.")
        for r in records:
            if r.shape != first.shape or r.dtype != first.dtype:
                raise QuantDeskError(
                    f"The experts of {gguf_name} differ in shape or type ({r.name} is "
                    f"{r.dtype}{list(r.shape)}, {first.name} is {first.dtype}{list(first.shape)}).",
                    "The checkpoint is inconsistent; download the model again.")
        shape = (n_expert, *first.shape)

        def stacked(read: Callable[[TensorRecord], np.ndarray]) -> np.ndarray:
            out = None
            for i, r in enumerate(records):  # one expert in memory besides the result
                values = read(r)
                if out is None:
                    out = np.empty(shape, dtype=values.dtype)
                out[i] = values
            return out

        return SourceTensor(gguf_name, shape, STORED_TYPES.get(first.dtype, GGMLQuantizationType.F32),
                            lambda: stacked(TensorRecord.load_f32),
                            lambda: stacked(TensorRecord.load_stored))

    def _embedding_shape(self, shape: tuple[int, ...], record: TensorRecord) -> tuple[int, ...]:
        n_tokens = len(self.vocab.tokens)
        if self.family.trim_embeddings and shape[0] > n_tokens:
            shape = (n_tokens, *shape[1:])
        if shape[0] != n_tokens:
            raise QuantDeskError(
                f"The embedding matrix in {record.file.path.name} has {shape[0]} rows but the "
                f"tokenizer has {n_tokens} tokens.", "The tokenizer and the weights do not match.")
        return shape

    def _loaders(self, hf_name: str, record: TensorRecord, shape: tuple[int, ...]
                 ) -> tuple[Callable[[], np.ndarray], Optional[Callable[[], np.ndarray]]]:
        """``load`` (float32) and ``load_stored`` (the checkpoint's own 16-bit values, when
        the tensor needs no arithmetic: trimming and the Q/K row order are exact on any
        dtype; a norm offset is not, so such a tensor has no ``load_stored``)."""
        family, config = self.family, self.config
        n_head = config["num_attention_heads"]
        n_head_kv = config.get("num_key_value_heads") or n_head
        module = hf_name.rsplit(".", 1)[0]
        heads = None
        if family.permute_qk and module.endswith("self_attn.q_proj"):
            heads = n_head
        elif family.permute_qk and module.endswith("self_attn.k_proj"):
            heads = n_head_kv
        shift = family.norm_offset if hf_name.endswith("norm.weight") else 0.0

        def arranged(values: np.ndarray) -> np.ndarray:
            if values.shape != shape:
                values = values[: shape[0]]  # trimmed embedding rows: still contiguous
            if heads is not None:
                values = permute_qk_rows(values, heads)
            return values

        def load() -> np.ndarray:
            values = arranged(record.load_f32())
            if shift:
                values += np.float32(shift)
            return np.ascontiguousarray(values, dtype=np.float32)

        def load_stored() -> np.ndarray:
            return np.ascontiguousarray(arranged(record.load_stored()))

        return load, (None if shift else load_stored)

    def close(self) -> None:
        """Release the memory maps of the weight files."""
        self.folder.close()

    def __enter__(self) -> "HFSource":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_hf_folder(path: Path | str, pre_tokenizer: Optional[str] = None) -> HFSource:
    """Open a local Hugging Face checkpoint folder as a :class:`TensorSource`.

    Args:
        path: Folder with config.json, *.safetensors and tokenizer files.
        pre_tokenizer: llama.cpp pre-tokenizer name to use when a byte-level BPE
            tokenizer's own is not recognised (see :mod:`quantize.convert.pretokenizer`).

    Raises:
        QuantDeskError: for anything about the folder a user can fix or should know.
    """
    return HFSource(Path(path), pre_tokenizer)
