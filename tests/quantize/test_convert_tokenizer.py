"""llama.cpp tokenizes with our converted vocabulary exactly as HF tokenizers does.

For each tokenizer family (byte-level BPE with Llama-3, Qwen2 and SmolLM pre-tokenizers;
SentencePiece in Llama/TinyLlama, Gemma and Phi-3 styles), the converted GGUF is loaded
with ``vocab_only=True`` and ``Llama.tokenize(special=True)`` must return the ids
transformers' tokenizer returns on a multilingual corpus, BOS included where the model
adds one. Pre-tokenizer identification is checked on its own: unknown splits are refused
unless named explicitly.
"""

from __future__ import annotations

import json

import pytest

from models.foundation.errors import QuantDeskError
from quantize.convert import convert
from quantize.convert.pretokenizer import identify_pre_tokenizer
from tests.factory.checkpoints import write_tiny_checkpoint
from tests.quantize.convert_oracles import hf_tokenizer, run_llama_cpp

pytest.importorskip("transformers")

CORPUS = [
    "The quick brown fox jumps over the lazy dog. It's fine, isn't it? We'Ve a'lL",
    "def add(a, b):\n    return a + b\n\n\tfor i in range(10):  print(i*2)",
    "Numbers: 0 1 12 123 1234 12345 3.14159 2026-11-22 1,000,000 007",
    "  leading spaces,   runs    of spaces\n\n\n\nnewlines \r\n and\ttabs   ",
    "Emoji: 😀 🚀 🦙🦙 ❤️ 👍🏽 🇫🇷 ∑ ∫ → ©",
    "敏捷的棕色狐狸跳过了懒狗。素早い茶色の狐。빠른 갈색 여우. Быстрая лиса. Grüße, ¿Qué tal?",
    "<html><body class=\"main\">{\"key\": [1, 2, 3]}</body></html>",
    "Zebra xylophone quokka — words the tokenizer never saw: ÆØÅ ŁŻŹ ğış",
    " ",
    "",
]
LEGACY_SPACE_AFTER_SPECIAL = ("tinyllama",)
SPECIAL_TEXT = {  # special tokens inside text: parsed as single tokens by both sides
    "llama": "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n",
    "qwen2": "<|im_start|>system\nBe brief.<|im_end|><|endoftext|>",
    "smollm": "<|im_start|>user 42<|im_end|>",
    "tinyllama": "[INST] hello [/INST] hi</s>",
    "gemma2": "<start_of_turn>user\nhello<end_of_turn>\n<start_of_turn>model\n",
    "phi3": "<|user|>\nhello<|end|>\n<|assistant|>\n",
}


def _sentencepiece_ids(model_dir, texts, bos):
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor(model_file=str(model_dir / "tokenizer.model"))
    return [bos + sp.encode(t) for t in texts]


@pytest.mark.parametrize("arch", list(SPECIAL_TEXT))
def test_token_ids_match_hf_tokenizers(tmp_path, arch):
    """Byte-level BPE: HF tokenizers is the oracle for every text.

    SentencePiece: the model's own tokenizer.model (run by the sentencepiece package) is
    the oracle for plain text, because transformers' tokenizer.json converted from it
    merges runs of spaces differently (e.g. " " → "▁" instead of SentencePiece's "▁▁" with
    the space prefix); HF must still agree wherever it agrees with SentencePiece, and is
    the oracle for text with special tokens (SentencePiece does not parse them).

    Known difference, not a conversion choice: llama.cpp's SentencePiece tokenizer puts a
    space prefix on text that follows a special token (the original "legacy" Llama
    behaviour); transformers' fast Llama tokenizer does not when the special token is a
    SentencePiece control piece (``</s> and`` → llama.cpp ``▁▁ and``, HF ``▁and``). GGUF has
    no key to change it, so for those families text after a special token is not compared.
    """
    ck = write_tiny_checkpoint(tmp_path / arch, arch=arch)
    gguf = convert(ck.path, tmp_path / "out.gguf", "f32")
    special = ["text before " + SPECIAL_TEXT[arch], SPECIAL_TEXT[arch] + " and after"]
    if arch in LEGACY_SPACE_AFTER_SPECIAL:
        special[1] = SPECIAL_TEXT[arch]
    texts = CORPUS + special
    tok = hf_tokenizer(ck.path)
    hf = [tok(t, add_special_tokens=True)["input_ids"] for t in texts]
    got = run_llama_cpp({"kind": "tokenize", "model": str(gguf), "texts": texts, "add_bos": True})["ids"]
    spm = (ck.path / "tokenizer.model").exists()
    if spm:
        bos = hf[-1][:1] if hf[-1][:1] == [tok.bos_token_id] else []
        sp = _sentencepiece_ids(ck.path, CORPUS, bos)
        for text, want, have, theirs in zip(CORPUS, sp, got, hf):
            assert have == want, f"{arch}: {text!r}\nsentencepiece: {want}\nllama.cpp:     {have}"
            assert theirs != want or have == theirs
        checked = list(zip(special, hf[len(CORPUS):], got[len(CORPUS):]))
    else:
        checked = list(zip(texts, hf, got))
    for text, want, have in checked:
        assert have == want, f"{arch}: {text!r}\nHF:        {want}\nllama.cpp: {have}"
    # The special text really used special tokens (one id each), not their characters.
    specials = set(tok.all_special_ids) | set(tok.added_tokens_decoder)
    assert sum(i in specials for i in hf[-2] if i != tok.bos_token_id) >= 1


def _tokenizer_json(ck_path):
    return json.loads((ck_path / "tokenizer.json").read_text())


@pytest.mark.parametrize("arch,name", [("llama", "llama-bpe"), ("qwen2", "qwen2"), ("smollm", "smollm")])
def test_pre_tokenizer_is_identified_by_structure(tmp_path, arch, name):
    ck = write_tiny_checkpoint(tmp_path / arch, arch=arch)
    assert identify_pre_tokenizer(ck.path / "tokenizer.json") == name


def test_unknown_pre_tokenizer_is_refused_unless_named(tmp_path):
    ck = write_tiny_checkpoint(tmp_path / "m", arch="llama")
    data = _tokenizer_json(ck.path)
    split = data["pre_tokenizer"]["pretokenizers"][0]
    split["pattern"]["Regex"] = r"\p{L}+|\p{N}{1,5}|[^\s\p{L}\p{N}]+|\s+"  # a split llama.cpp lacks
    (ck.path / "tokenizer.json").write_text(json.dumps(data))
    out = tmp_path / "out.gguf"
    with pytest.raises(QuantDeskError, match="pre-tokenizer"):
        convert(ck.path, out, "f32")
    assert not out.exists()
    # An explicit override is the user's statement that llama.cpp's split matches.
    convert(ck.path, out, "f32", pre_tokenizer="llama-bpe")
    assert out.exists()
    with pytest.raises(QuantDeskError, match="Unknown pre-tokenizer name"):
        convert(ck.path, tmp_path / "other.gguf", "f32", pre_tokenizer="no-such-split")
