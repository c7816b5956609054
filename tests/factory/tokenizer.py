"""Train a small but real byte-level BPE tokenizer with the ``tokenizers`` library.

The result is a genuine ``tokenizer.json`` (merges, byte-level alphabet, a Llama-3 style
pre-tokenizer regex, added special tokens), so converters and llama.cpp meet the same
structures they meet in downloaded models, only with a few hundred entries.
"""

from __future__ import annotations

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

# The Llama 3 pre-tokenizer split (also used by SmolLM-style byte-level BPEs).
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

CHATML_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")

TRAINING_CORPUS = [
    "The quick brown fox jumps over the lazy dog. It's a fine day, isn't it?",
    "Local language models run on your own computer, without sending text anywhere.",
    "Quantization stores weights in fewer bits: Q8_0, Q4_K_M, Q6_K and friends.",
    "def add(a, b):\n    return a + b\n\nfor i in range(10):\n    print(i * 2)\n",
    "    indented   text with    runs of spaces\n\n\nand newlines\tand tabs",
    "Numbers: 0 1 2 3 12 123 1234 12345 3.14159 2026-11-22 1,000,000",
    "Le renard brun rapide saute par-dessus le chien paresseux. Ça va très bien.",
    "Der schnelle braune Fuchs springt über den faulen Hund. Grüße aus München!",
    "El rápido zorro marrón salta sobre el perro perezoso. ¿Qué tal? ¡Muy bien!",
    "Быстрая коричневая лиса прыгает через ленивую собаку.",
    "敏捷的棕色狐狸跳过了懒狗。我们在本地运行语言模型。",
    "素早い茶色の狐がのろまな犬を飛び越える。こんにちは世界。",
    "빠른 갈색 여우가 게으른 개를 뛰어넘습니다.",
    "Emoji: 😀 🚀 🦙 ❤️ 👍🏽 🇫🇷 and symbols ∑ ∫ √ ≤ ≥ → ©",
    "<html><body class=\"main\">{\"key\": [1, 2, 3], \"ok\": true}</body></html>",
]


def train_bpe_tokenizer(vocab_size: int = 384, repeats: int = 20) -> Tokenizer:
    """Train a byte-level BPE with ChatML special tokens at ids 0, 1, 2."""
    tokenizer = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(CHATML_SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(TRAINING_CORPUS * repeats, trainer=trainer)
    return tokenizer


def byte_level_decoder() -> dict:
    """GPT-2's byte-level BPE alphabet (each byte a printable character), inverted."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) \
        + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = list(bs), 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}
