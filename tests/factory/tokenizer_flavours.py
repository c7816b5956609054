"""Tokenizer files of the families beyond the ChatML/Llama-3 BPE: each written as the Hub ships it.

- Byte-level BPEs trained with ``tokenizers`` on other pre-tokenizers: Qwen2's regex
  (digits one by one), SmolLM's (Digits + GPT-2 ByteLevel split).
- SentencePiece BPE models trained with the ``sentencepiece`` package, Llama/TinyLlama
  style (``<unk> <s> </s>``, a leading-space prefix, BOS added) and Gemma style (``<pad>
  <eos> <bos> <unk>``, no prefix, ``<start_of_turn>``/``<end_of_turn>``), with the
  ``tokenizer.json`` transformers derives from them saved beside ``tokenizer.model``.

Every writer returns a :class:`TokenizerFiles` the checkpoint factory turns into config ids.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from tests.factory.tokenizer import CHATML_SPECIALS, TRAINING_CORPUS

QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

MISTRAL_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
    "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% else %}{{ message['content'] + eos_token }}"
    "{% endif %}{% endfor %}"
)
GEMMA_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)
PHI3_TEMPLATE = (
    "{% for message in messages %}{{ '<|' + message['role'] + '|>' + '\n' + message['content'] + '<|end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}"
)
PHI3_SPECIALS = ["<|endoftext|>", "<|assistant|>", "<|end|>", "<|user|>", "<|system|>"]


@dataclass
class TokenizerFiles:
    """What a flavour wrote: vocabulary size and the special tokens' texts and ids."""

    vocab_size: int
    bos: str | None
    eos: str
    ids: dict[str, int]


#: SmolVLM's image markers: around each tile and the overview, the overview's tag, the
#: placeholder of each image token, and the tiles' places (up to 3 × 3 here; 6 × 6 on the Hub).
SMOLVLM_IMAGE_SPECIALS = ["<fake_token_around_image>", "<image>", "<global-img>"] + [
    f"<row_{r}_col_{c}>" for r in range(1, 4) for c in range(1, 4)]


def write_byte_level_bpe(dest: Path, flavour: str, vocab_size: int, max_len: int,
                         corpus: Optional[Iterable[str]] = None) -> TokenizerFiles:
    """A ChatML byte-level BPE with Qwen2's (``qwen2``) or SmolLM's (``smollm``) pre-tokenizer;
    ``smolvlm`` is SmolLM's with SmolVLM's image markers added. It is trained on ``corpus``
    (default: the factory's small training corpus)."""
    tokenizer = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    if flavour == "qwen2":
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ])
    else:
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
        ])
    tokenizer.decoder = decoders.ByteLevel()
    specials = list(CHATML_SPECIALS) + (SMOLVLM_IMAGE_SPECIALS if flavour == "smolvlm" else [])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    # libmtmd puts SmolVLM's overview after "\n\n" as one token, which SmolLM's vocabulary has.
    paragraphs = ["one\n\n\ntwo"] * 50 if flavour == "smolvlm" else []
    tokenizer.train_from_iterator(list(corpus) if corpus is not None else TRAINING_CORPUS * 20 + paragraphs,
                                  trainer=trainer)
    tokenizer.save(str(dest / "tokenizer.json"))
    ids = {t: tokenizer.token_to_id(t) for t in specials}
    bos = None if flavour == "qwen2" else "<|im_start|>"
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": bos, "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>", "unk_token": None if flavour == "qwen2" else "<|endoftext|>",
        "add_bos_token": False, "add_eos_token": False, "model_max_length": max_len,
        "clean_up_tokenization_spaces": False,
        "added_tokens_decoder": {str(i): {"content": t, "special": True, "normalized": False, "lstrip": False,
                                          "rstrip": False, "single_word": False} for t, i in ids.items()},
    }
    (dest / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return TokenizerFiles(tokenizer.get_vocab_size(), bos, "<|im_end|>", ids)


#: The image markers of Gemma 3's tokenizer (begin, end, and the placeholder of each image token).
GEMMA_IMAGE_SPECIALS = ["<start_of_image>", "<end_of_image>", "<image_soft_token>"]


def _train_spm(gemma: bool, vocab_size: int, symbols: tuple[str, ...] = ()) -> bytes:
    import sentencepiece as spm

    buf = io.BytesIO()
    ids = dict(pad_id=0, eos_id=1, bos_id=2, unk_id=3) if gemma else dict(unk_id=0, bos_id=1, eos_id=2, pad_id=-1)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(TRAINING_CORPUS * 20), model_writer=buf, vocab_size=vocab_size,
        model_type="bpe", byte_fallback=True, character_coverage=0.995, split_digits=True,
        user_defined_symbols=(["<start_of_turn>", "<end_of_turn>"] if gemma else []) + list(symbols),
        add_dummy_prefix=not gemma, remove_extra_whitespaces=False, allow_whitespace_only_pieces=True,
        normalization_rule_name="identity", hard_vocab_limit=False, minloglevel=2, **ids)
    return buf.getvalue()


def write_sentencepiece(dest: Path, flavour: str, max_len: int, vocab_size: int = 600) -> TokenizerFiles:
    """A SentencePiece tokenizer.model (``llama``, ``gemma`` or ``phi3`` style; ``gemmavl`` is
    Gemma with Gemma 3's image markers) + tokenizer.json."""
    import transformers

    vision = flavour == "gemmavl"
    gemma = flavour == "gemma" or vision
    image_specials = GEMMA_IMAGE_SPECIALS if vision else []
    (dest / "tokenizer.model").write_bytes(_train_spm(gemma, vocab_size, tuple(image_specials)))
    bos, eos, unk = ("<bos>", "<eos>", "<unk>") if gemma else ("<s>", "</s>", "<unk>")
    config = {
        "tokenizer_class": "GemmaTokenizer" if gemma else "LlamaTokenizer",
        "bos_token": bos, "eos_token": eos, "unk_token": unk,
        "pad_token": "<pad>" if gemma else None,
        "add_bos_token": True, "add_eos_token": False, "model_max_length": max_len,
        "clean_up_tokenization_spaces": False,
        # Llama/TinyLlama/Phi-3 tokenizers behave as "legacy" (a space prefix after special
        # tokens too), which is what llama.cpp implements for SentencePiece.
        "legacy": not gemma,
    }
    (dest / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    tok = transformers.AutoTokenizer.from_pretrained(dest)
    if flavour == "phi3":
        # Phi-3's chat markers are tokens added after the SentencePiece ids; as in the real
        # Phi-3 tokenizer, all but <|endoftext|> swallow the whitespace after them (rstrip).
        tok.add_special_tokens({"additional_special_tokens": [
            transformers.AddedToken(t, rstrip=t != "<|endoftext|>", special=True, normalized=False)
            for t in PHI3_SPECIALS]})
        tok.eos_token = "<|endoftext|>"
    tok.save_pretrained(dest)
    specials = [bos, eos, unk] + (["<start_of_turn>", "<end_of_turn>"] if gemma else []) + image_specials
    specials += PHI3_SPECIALS if flavour == "phi3" else []
    ids = {t: tok.convert_tokens_to_ids(t) for t in specials}
    return TokenizerFiles(len(tok), bos, tok.eos_token, ids)
