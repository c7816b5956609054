"""The token list of a model for llama.cpp: byte-level BPE from tokenizer.json, or SentencePiece.

llama.cpp stores the vocabulary as parallel arrays indexed by token id:
``tokenizer.ggml.tokens`` (text), ``token_type`` (gguf ``TokenType``), ``scores``
(SentencePiece only) and ``merges`` (BPE only). Ids the tokenizer does not use, up to the
model's ``vocab_size``, are filled with ``[PAD<id>]`` tokens of type UNUSED so that the
embedding matrix and the token list have the same length.

Added tokens (``<|im_start|>``, ``<start_of_turn>``...) are stored as their raw text:
CONTROL when special (llama.cpp then matches them in text only when asked to parse
specials, as HF does), USER_DEFINED otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from gguf import TokenType

from models.foundation.errors import QuantDeskError


@dataclass
class Vocab:
    """Everything llama.cpp needs to rebuild the tokenizer, before special-token metadata."""

    model: str  # tokenizer.ggml.model: "gpt2" (byte-level BPE) or "llama" (SentencePiece)
    pre: str  # tokenizer.ggml.pre
    tokens: list[str]
    types: list[int]
    scores: Optional[list[float]] = None
    merges: list[str] = field(default_factory=list)
    _ids: Optional[dict[str, int]] = field(default=None, init=False, repr=False)

    def id_of(self, text: str) -> Optional[int]:
        """Id of the token whose text is ``text`` (the last one wins, as in HF), if any."""
        if self._ids is None:
            self._ids = {t: i for i, t in enumerate(self.tokens)}
        return self._ids.get(text)


def looks_special(text: str) -> bool:
    """Added tokens some models forget to mark special (convert_hf_to_gguf's heuristic)."""
    return (text in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
            or (text.startswith("<|") and text.endswith("|>"))
            or (text.startswith("<｜") and text.endswith("｜>"))
            or (text.startswith("<unused") and text.endswith(">")))


def _padded(size: int) -> tuple[list[str], list[int]]:
    return [f"[PAD{i}]" for i in range(size)], [int(TokenType.UNUSED)] * size


def _check_id(token_id: int, size: int, text: str, source: str) -> None:
    if not 0 <= token_id < size:
        raise QuantDeskError(
            f"Token {text!r} in {source} has id {token_id}, outside the model's vocabulary of "
            f"{size} (config.json vocab_size).", "The tokenizer and the model do not match.")


def _merge_strings(merges: list) -> list[str]:
    """Merges as ``"a b"`` strings; pairs (tokenizers ≥ 0.20) with spaces escaped as U+0120."""
    if not merges or isinstance(merges[0], str):
        return list(merges)
    out = []
    for pair in merges:
        if not (isinstance(pair, list) and len(pair) == 2):
            raise QuantDeskError("tokenizer.json has merges in an unknown format.",
                                 "Download the tokenizer again.")
        out.append(" ".join("".join(chr(ord(c) + 256) if c == " " else c for c in part) for part in pair))
    return out


def bpe_vocab(tokenizer_json: dict, vocab_size: Optional[int], pre: str) -> Vocab:
    """A byte-level BPE vocabulary from a parsed ``tokenizer.json``."""
    model = tokenizer_json.get("model") or {}
    if model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
        raise QuantDeskError(
            f"tokenizer.json holds a {model.get('type')} tokenizer without a tokenizer.model; "
            "QuantDesk converts byte-level BPE tokenizers and SentencePiece tokenizer.model files.",
            "Add the model's tokenizer.model file to the folder, if it has one.")
    added = tokenizer_json.get("added_tokens") or []
    size = vocab_size or 1 + max([*model["vocab"].values(), *(a["id"] for a in added)])
    tokens, types = _padded(size)
    for text, token_id in model["vocab"].items():
        _check_id(token_id, size, text, "tokenizer.json")
        tokens[token_id], types[token_id] = text, int(TokenType.NORMAL)
    for entry in added:
        text, token_id = entry["content"], int(entry["id"])
        _check_id(token_id, size, text, "tokenizer.json")
        tokens[token_id] = text
        types[token_id] = int(TokenType.CONTROL if entry.get("special") or looks_special(text)
                              else TokenType.USER_DEFINED)
    return Vocab("gpt2", pre, tokens, types, merges=_merge_strings(model.get("merges") or []))


def spm_vocab(model_path: Path, vocab_size: Optional[int], added_sources: list[tuple[str, dict]]) -> Vocab:
    """A SentencePiece vocabulary from ``tokenizer.model``, plus added tokens.

    Args:
        model_path: The ``tokenizer.model`` file.
        vocab_size: ``config.json``'s vocab_size (the token list is padded to it).
        added_sources: ``(file name, {id: {"content", "special"}})`` maps of added tokens,
            applied in order (added_tokens.json, tokenizer_config.json, tokenizer.json).
    """
    try:
        from sentencepiece import SentencePieceProcessor
    except ImportError as exc:
        raise QuantDeskError("Converting a SentencePiece tokenizer needs the sentencepiece "
                             "package, which is not installed.",
                             "Install it with: pip install sentencepiece") from exc
    sp = SentencePieceProcessor()
    try:
        sp.LoadFromFile(str(model_path))
    except (OSError, RuntimeError) as exc:
        raise QuantDeskError(f"{model_path} is not a readable SentencePiece model ({exc}).",
                             "Download the tokenizer again.") from exc
    size = vocab_size or sp.vocab_size()
    tokens, types = _padded(size)
    scores = [-10000.0] * size
    for i in range(min(size, sp.vocab_size())):
        tokens[i], scores[i] = sp.IdToPiece(i), float(sp.GetScore(i))
        if sp.IsUnknown(i):
            types[i] = int(TokenType.UNKNOWN)
        elif sp.IsControl(i):
            types[i] = int(TokenType.CONTROL)
        elif sp.IsUnused(i):
            types[i] = int(TokenType.UNUSED)
        elif sp.IsByte(i):
            types[i] = int(TokenType.BYTE)
        else:
            types[i] = int(TokenType.NORMAL)
    for source, added in added_sources:
        for token_id, entry in added.items():
            text = entry["content"]
            if token_id >= size:
                continue  # as the reference: tokens past vocab_size have no embedding row
            tokens[token_id], scores[token_id] = text, -1000.0
            if entry.get("special") or looks_special(text):
                types[token_id] = int(TokenType.CONTROL)
            else:
                # llama.cpp matches USER_DEFINED tokens in raw text: un-escape SentencePiece spaces.
                tokens[token_id] = text.replace("\u2581", " ")
                types[token_id] = int(TokenType.USER_DEFINED)
    return Vocab("llama", "default", tokens, types, scores=scores)


def added_token_maps(folder) -> list[tuple[str, dict]]:
    """Added tokens from a folder's side files, as ``(file, {id: entry})`` in reference order."""
    out: list[tuple[str, dict]] = []
    plain = folder.json("added_tokens.json")
    if plain:
        out.append(("added_tokens.json", {int(i): {"content": t} for t, i in plain.items()}))
    config = folder.json("tokenizer_config.json") or {}
    decoder = config.get("added_tokens_decoder") or {}
    if decoder:
        out.append(("tokenizer_config.json", {int(i): e for i, e in decoder.items()}))
    tokenizer_json = folder.json("tokenizer.json") or {}
    listed = tokenizer_json.get("added_tokens") or []
    if listed:
        out.append(("tokenizer.json", {int(e["id"]): e for e in listed}))
    return out
