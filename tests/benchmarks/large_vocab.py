"""Qwen-sized vocabularies for the structured-output benchmarks, made offline.

Today's models have 150,000 (Qwen) to 262,000 (Gemma) tokens; SmolLM2, the model the
tests can fetch, has 49,152. Two stand-ins:

- :func:`qwen_tokens`: Qwen's own byte-level BPE vocabulary (151,643 tokens, the same in
  Qwen 1, 2 and 2.5), read from the ``qwen.tiktoken`` file that Alibaba's ``dashscope``
  package ships on PyPI (fetched once with pip, like the test model). Only the token
  bytes are used, for llguidance's masks; no weights exist for it here.
- :func:`padded_smollm2`: SmolLM2 itself with its vocabulary grown to 152,064 tokens by
  :func:`merged_tokens` (pairs of its tokens, what BPE merges are) and zero embedding
  rows for them, so a model really decodes with a Qwen-sized output layer, sampler and
  grammar masks while writing SmolLM2's text (a zero row gives logit 0, which the
  instruct model's chosen tokens beat).
"""

from __future__ import annotations

import base64
import random
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np

QWEN_PACKAGE = "dashscope==2.0.2"
QWEN_MEMBER = "dashscope/resources/qwen.tiktoken"
#: Qwen2.5's embedding rows (151,643 tokens, its special tokens, padding).
LARGE_VOCAB = 152_064
# The longest merged token. Pairs of SmolLM2's tokens up to 14 bytes average 9.5 bytes a
# token, longer than Qwen's own 6.4: a harsher trie for the masks than the real one.
MAX_MERGED = 14


def qwen_tokens(cache: Path) -> list[bytes]:
    """Qwen's 151,643 regular tokens as bytes, in rank order (fetched from PyPI once)."""
    target = cache / "qwen.tiktoken"
    if not target.exists():
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q",
                        "--disable-pip-version-check", "-d", str(cache), QWEN_PACKAGE], check=True)
        wheel = next(iter(sorted(cache.glob("dashscope-*.whl"))))
        with zipfile.ZipFile(wheel) as zf:
            part = target.with_suffix(".part")
            part.write_bytes(zf.read(QWEN_MEMBER))
            part.replace(target)
    tokens = []
    for line in target.read_bytes().splitlines():
        text, rank = line.split()
        assert int(rank) == len(tokens), "qwen.tiktoken lists ranks in order"
        tokens.append(base64.b64decode(text))
    return tokens


def gguf_tokens(reader) -> list[bytes]:
    """A byte-level BPE GGUF's tokens as bytes (``reader``: a ``gguf.GGUFReader``), control
    tokens marked the way llguidance expects (a 0xff byte first)."""
    import gguf

    from tests.factory.tokenizer import byte_level_decoder

    decoder = byte_level_decoder()
    texts = reader.fields["tokenizer.ggml.tokens"].contents()
    kinds = reader.fields["tokenizer.ggml.token_type"].contents()
    return [b"\xff" + t.encode() if k == gguf.TokenType.CONTROL else bytes(decoder[c] for c in t)
            for t, k in zip(texts, kinds)]


def merged_tokens(base: list[bytes], size: int) -> list[bytes]:
    """``base`` followed by distinct pairs of its plain tokens (at most ``MAX_MERGED`` bytes,
    fixed seed) until there are ``size`` tokens. Control tokens start with 0xff, as
    llguidance marks them, and are never merged."""
    r = random.Random(150)
    plain = [t for t in base if t and not t.startswith(b"\xff")]
    tokens, seen = list(base), set(base)
    while len(tokens) < size:
        merged = r.choice(plain) + r.choice(plain)
        if merged not in seen and len(merged) <= MAX_MERGED:
            seen.add(merged)
            tokens.append(merged)
    return tokens


def padded_smollm2(source: Path, target: Path, size: int = LARGE_VOCAB) -> Path:
    """SmolLM2's GGUF with ``size`` tokens: merged tokens appended to the vocabulary
    (written in the byte-level alphabet the GGUF uses, type NORMAL, no merges, so the
    tokenizer never produces them but the model can emit them) and zero rows appended to
    ``token_embd`` (SmolLM2 ties it to the output layer). Written once."""
    import gguf

    from tests.factory.tokenizer import byte_level_decoder

    if target.exists():
        return target
    reader = gguf.GGUFReader(str(source))
    encoder = {b: c for c, b in byte_level_decoder().items()}
    tokens = gguf_tokens(reader)
    extra = merged_tokens(tokens, size)[len(tokens):]
    part = target.with_suffix(".part")
    writer = gguf.GGUFWriter(str(part), reader.fields["general.architecture"].contents())
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        value = field.contents()
        if name == "tokenizer.ggml.tokens":
            value = value + ["".join(encoder[b] for b in t) for t in extra]
        elif name == "tokenizer.ggml.token_type":
            value = value + [int(gguf.TokenType.NORMAL)] * len(extra)
        elif name.endswith(".vocab_size"):
            value = size
        sub_type = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(name, value, field.types[0], sub_type=sub_type)
    for tensor in reader.tensors:
        data = np.asarray(tensor.data)
        if tensor.name == "token_embd.weight":
            data = np.concatenate([data, np.zeros((size - data.shape[0], data.shape[1]), data.dtype)])
        writer.add_tensor(tensor.name, data, raw_dtype=tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    part.replace(target)
    return target
