"""Name a byte-level BPE tokenizer's pre-tokenizer the way llama.cpp knows it.

llama.cpp does not run tokenizer.json's pre-tokenizer; it has a fixed list of them
compiled in (``llama-vocab.cpp``) and picks one by the GGUF key ``tokenizer.ggml.pre``.
A wrong name splits text differently and yields different token ids with no error, so
the name must be right or the conversion must stop.

Two ways to recognise it, tried in order:

1. The reference converter's way: encode a fixed check text and hash the token ids;
   known hashes (from convert_hf_to_gguf.py's table, for the families we support) name
   the pre-tokenizer. Needs the ``tokenizers`` package; real downloaded models match here.
2. The structure of tokenizer.json's ``pre_tokenizer`` itself: the split regex and the
   steps around it. A tokenizer trained anew on a known split (our tests' tiny ones, or a
   fine-tune with an extended vocabulary) matches here even though its hash is new.

Unknown pre-tokenizers are refused with an error naming the regex, unless the caller
passes an explicit ``override`` name (``quantdesk convert --pre-tokenizer NAME``): the
user then vouches that llama.cpp's pre-tokenizer of that name splits text identically.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Optional

from models.foundation.errors import QuantDeskError

# The check text of convert_hf_to_gguf.get_vocab_base_pre (a fact of the format we match).
CHECK_TEXT = (
    "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n🚀 (normal) 😶\u200d🌫️ (multiple emojis "
    "concatenated) ✅ 🦙🦙 3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 "
    "កាន់តែពិសេសអាច😁 ?我想在apple工作1314151天～ ------======= нещо на Български "
    "''''''```````\"\"\"\"......!!!!!!?????? I've been 'told he's there, 'RE you sure? 'M not "
    "sure I'll make it, 'D you like some tea? We'Ve a'lL"
)

# sha256(str(token_ids_of_CHECK_TEXT)) → llama.cpp pre-tokenizer, for supported families.
KNOWN_HASHES = {
    "0ef9807a4087ebef797fc749390439009c3b9eda9ad1a097abbe738f486c01e5": "llama-bpe",  # Llama 3
    "e636dc30a262dcc0d8c323492e32ae2b70728f4df7dfe9737d9f920a282b8aea": "qwen2",      # Qwen1.5/2/2.5
    "d4540891389ea895b53b399da6ac824becc30f2fba0e9ddbb98f92e55ca0e97c": "qwen2",      # Qwen3
    "855059429035d75a914d1eda9f10a876752e281a054a7a3d421ef0533e5b6249": "smollm",     # SmolLM/SmolLM2
    "3ce83efda5659b07b1ad37ca97ca5797ea4285d9b9ab0dc679e4a720c9da7454": "gpt-2",      # GPT-2
}

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"

# Pre-tokenizer structures (see :func:`structure`) → llama.cpp name. "bytelevel+regex" is
# ByteLevel with its built-in GPT-2 split; "digits" splits every digit apart first.
KNOWN_STRUCTURES = {
    (("split", LLAMA3_REGEX), ("bytelevel",)): "llama-bpe",
    (("split", QWEN2_REGEX), ("bytelevel",)): "qwen2",
    (("split", GPT2_REGEX), ("bytelevel",)): "gpt-2",
    (("bytelevel+regex",),): "gpt-2",
    (("digits",), ("bytelevel+regex",)): "smollm",
}

#: Names accepted as an explicit override (llama.cpp knows many more; these are the
#: byte-level ones whose splits we have read in llama-vocab.cpp).
OVERRIDE_NAMES = ("llama-bpe", "qwen2", "smollm", "gpt-2", "starcoder", "default")


def _step(pt: dict) -> tuple:
    kind = pt.get("type")
    if kind == "Split":
        pattern = pt.get("pattern") or {}
        regex = pattern.get("Regex", pattern.get("String"))
        if pt.get("behavior") != "Isolated" or pt.get("invert"):
            return ("split-other", regex, pt.get("behavior"), pt.get("invert"))
        return ("split", regex)
    if kind == "ByteLevel":
        if pt.get("add_prefix_space"):
            return ("bytelevel-prefix",)
        return ("bytelevel+regex",) if pt.get("use_regex", True) else ("bytelevel",)
    if kind == "Digits":
        return ("digits",) if pt.get("individual_digits") else ("digits-grouped",)
    return (str(kind),)


def structure(tokenizer_json: dict) -> tuple:
    """The pre-tokenizer as a tuple of steps, comparable with :data:`KNOWN_STRUCTURES`."""
    pre = tokenizer_json.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers") if pre.get("type") == "Sequence" else [pre]
    return tuple(_step(s) for s in steps if s)


def check_hash(tokenizer_path: Path) -> Optional[str]:
    """The convert_hf_to_gguf hash of the check text's token ids, or None without ``tokenizers``."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return None
    try:
        ids = Tokenizer.from_file(str(tokenizer_path)).encode(CHECK_TEXT).ids
    except Exception:  # a tokenizer.json the library cannot load: fall back to the structure
        return None
    return hashlib.sha256(str(ids).encode()).hexdigest()


def identify_pre_tokenizer(tokenizer_path: Path, override: Optional[str] = None,
                           tokenizer_json: Optional[dict] = None) -> str:
    """The ``tokenizer.ggml.pre`` name for a byte-level BPE ``tokenizer.json``.

    Raises:
        QuantDeskError: when the pre-tokenizer is not recognised and no override is given.
    """
    if override:
        if override not in OVERRIDE_NAMES:
            raise QuantDeskError(f"Unknown pre-tokenizer name \"{override}\".",
                                 f"Use one of: {', '.join(OVERRIDE_NAMES)}.")
        return override
    digest = check_hash(tokenizer_path)
    if digest in KNOWN_HASHES:
        return KNOWN_HASHES[digest]
    if tokenizer_json is None:
        tokenizer_json = json.loads(tokenizer_path.read_text(encoding="utf-8"))
    found = structure(tokenizer_json)
    name = KNOWN_STRUCTURES.get(found)
    if name is not None:
        return name
    raise QuantDeskError(
        f"The tokenizer of {tokenizer_path.parent.name} splits text with a pre-tokenizer "
        f"QuantDesk does not recognise ({json.dumps(found, ensure_ascii=False)[:300]}); llama.cpp "
        "would split text differently and produce wrong token ids.",
        "If you know which llama.cpp pre-tokenizer matches it, pass it explicitly "
        f"(--pre-tokenizer, one of {', '.join(OVERRIDE_NAMES)}).")
