"""``quantdesk convert``: the CLI drives the converter with a progress bar and plain errors."""

from __future__ import annotations

import subprocess
import sys

from gguf import GGMLQuantizationType as T
from gguf import GGUFReader

from models.foundation.jobs import Progress
from models.library import Library
from quantize.convert import convert
from tests.conftest import REPO_ROOT
from tests.factory.checkpoints import write_tiny_checkpoint


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", "convert", *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)


def test_cli_converts_a_folder(tmp_path):
    ck = write_tiny_checkpoint(tmp_path / "tiny", arch="qwen2", shards=2)
    done = _cli(str(ck.path), "--outtype", "bf16")
    assert done.returncode == 0, done.stderr
    out = ck.path / "tiny-BF16.gguf"
    assert done.stdout.strip() == str(out)
    assert "Converting" in done.stderr and "100.0%" in done.stderr
    types = {t.name: t.tensor_type for t in GGUFReader(out).tensors}
    assert types["blk.0.attn_q.weight"] == T.BF16 and types["blk.0.attn_q.bias"] == T.F32

    explicit = tmp_path / "elsewhere" / "model.gguf"
    assert _cli(str(ck.path), "-o", str(explicit)).returncode == 0
    assert GGUFReader(explicit).get_field("general.file_type").contents() == 1  # f16 by default
    # Both outputs are in the library as converted models, where the user put them.
    library = Library()
    assert [library.get(p).source for p in (out, explicit)] == ["converted", "converted"]
    assert library.get(explicit).quant == "F16" and library.get(out).quant == "BF16"


def test_cli_error_is_one_sentence_without_traceback(tmp_path):
    done = _cli(str(tmp_path))
    assert done.returncode != 0
    assert "has no config.json" in done.stderr and "Traceback" not in done.stderr


def test_progress_counts_output_bytes_to_the_total(tmp_path):
    ck = write_tiny_checkpoint(tmp_path / "m", arch="llama")
    seen: list[Progress] = []
    out = convert(ck.path, tmp_path / "o.gguf", "f16", report=seen.append)
    assert seen and seen[-1].done == seen[-1].total and seen[-1].stage == "Converting"
    assert all(a.done <= b.done for a, b in zip(seen, seen[1:]))
    data_bytes = sum(int(t.n_bytes) for t in GGUFReader(out).tensors)
    assert seen[-1].total == data_bytes
