"""llama.cpp's own ``convert_hf_to_gguf.py`` from the pinned llama-cpp-python sdist: the
byte-for-byte oracle of the converter.

The sdist (``pip download --no-deps --no-binary :all: llama-cpp-python==<pin>``) carries
the converter and its gguf-py in ``vendor/llama.cpp``; it is downloaded and unpacked once
into the llama-tools cache (:mod:`tests.benchmarks.llama_tools`, outside the repository)
and run in a child Python with torch, as a user of llama.cpp runs it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np


def reference_source() -> Path:
    """``vendor/llama.cpp`` of the pinned sdist (downloaded and unpacked on first use)."""
    from tests.benchmarks.llama_tools import default_cache_dir, unpack_sdist

    with open(os.devnull, "w") as log:
        return unpack_sdist(Path(default_cache_dir()), log)


#: Runs the converter with its BPE pre-tokenizer name given (argv[1]) instead of looked up
#: by the hash of a check text, which a tokenizer trained anew (the factory's) never matches.
_NAMED_PRE_TOKENIZER = """
import runpy, sys
from conversion.base import TextModel
name = sys.argv.pop(1)
TextModel.get_vocab_base_pre = lambda self, tokenizer: name
sys.argv[0] = "convert_hf_to_gguf.py"
runpy.run_path("convert_hf_to_gguf.py", run_name="__main__")
"""


def reference_convert(model_dir: Path, out: Path, outtype: str, mmproj: bool = False,
                      pre_tokenizer: str | None = None) -> Path:
    """Run ``convert_hf_to_gguf.py`` on ``model_dir``; the written file's path.

    ``pre_tokenizer`` names the BPE pre-tokenizer for the reference as ``quantdesk convert
    --pre-tokenizer`` does for ours (the factory's tokenizers are trained anew: their
    check-text hash is in no table).
    """
    source = reference_source()
    script = ["-c", _NAMED_PRE_TOKENIZER, pre_tokenizer] if pre_tokenizer else [str(source / "convert_hf_to_gguf.py")]
    args = [sys.executable, *script, str(model_dir), "--outtype", outtype,
            "--outfile", str(out)] + (["--mmproj"] if mmproj else [])
    proc = subprocess.run(args, cwd=source, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise AssertionError(f"convert_hf_to_gguf.py failed:\n{proc.stderr[-4000:]}")
    return out


#: Keys that differ by design: the name (from the folder, not the heuristics of gguf-py's
#: Metadata), the size label (counted over other tensors) and the quantization version
#: (written by llama.cpp only to files with quantized blocks).
IGNORED_KEYS = {"general.name", "general.size_label", "general.quantization_version"}


def gguf_differences(ours: Path, theirs: Path) -> list[str]:
    """What differs between two GGUF files' keys, values, tensor types and tensor bytes."""
    from gguf import GGUFReader

    a, b = GGUFReader(ours), GGUFReader(theirs)

    def fields(reader):
        return {f.name: (tuple(int(t) for t in f.types), f.contents()) for f in reader.fields.values()
                if not f.name.startswith("GGUF.") and f.name not in IGNORED_KEYS}

    out = []
    fa, fb = fields(a), fields(b)
    for key in sorted(fa.keys() | fb.keys()):
        if fa.get(key) != fb.get(key):
            out.append(f"{key}: ours {fa.get(key)} theirs {fb.get(key)}")
    ta, tb = {t.name: t for t in a.tensors}, {t.name: t for t in b.tensors}
    for name in sorted(ta.keys() | tb.keys()):
        if name not in ta or name not in tb:
            out.append(f"{name}: only in {'ours' if name in ta else 'theirs'}")
            continue
        x, y = ta[name], tb[name]
        if x.tensor_type != y.tensor_type or list(x.shape) != list(y.shape):
            out.append(f"{name}: ours {x.tensor_type.name}{list(x.shape)} theirs {y.tensor_type.name}{list(y.shape)}")
        elif not np.array_equal(np.asarray(x.data).view(np.uint8), np.asarray(y.data).view(np.uint8)):
            out.append(f"{name}: bytes differ")
    return out
