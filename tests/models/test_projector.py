"""Pairing a model with its vision encoder on disk (models.projector): beside it or one
folder up, a width that matches, F16 first; the encoder's own header decides."""

from __future__ import annotations

import shutil

from models.projector import find_projector, projector_candidates
from quantize.convert import convert
from quantize.convert.convert import convert_with_projector
from tests.factory.checkpoints import write_tiny_checkpoint
from tests.factory.vision import write_tiny_vision_checkpoint


def test_the_matching_encoder_beside_or_above_the_model_f16_first(tmp_path):
    ck = write_tiny_vision_checkpoint(tmp_path / "hf" / "gemma3")
    repo = tmp_path / "repo"
    (repo / "Q8_0").mkdir(parents=True)
    text, q8 = convert_with_projector(ck.path, repo / "Q8_0" / "gemma3-Q8_0.gguf", "q8_0")
    shutil.move(q8, repo / "mmproj-gemma3-Q8_0.gguf")  # the repository keeps it at its top
    _, f16 = convert_with_projector(ck.path, repo / "gemma3-F16.gguf", "f16")
    assert projector_candidates(text) == [f16, repo / "mmproj-gemma3-Q8_0.gguf"]
    assert find_projector(text) == f16  # one folder up; F16 before Q8_0

    # Beside a model of another width, the same encoder is passed over.
    narrow = write_tiny_checkpoint(tmp_path / "narrow", arch="llama", config_overrides={"hidden_size": 48})
    other = convert(narrow.path, repo / "narrow.gguf", "f16")
    assert projector_candidates(other) and find_projector(other) is None
    plain = write_tiny_checkpoint(tmp_path / "plain", arch="llama")
    assert find_projector(convert(plain.path, tmp_path / "alone" / "m.gguf", "f16")) is None


def test_the_encoder_counts_in_the_memory_prediction(tmp_path):
    from models.memory_fit import FitSettings, predict_memory

    ck = write_tiny_vision_checkpoint(tmp_path / "gemma3")
    text, projector = convert_with_projector(ck.path, tmp_path / "gemma3.gguf", "f16")
    size = projector.stat().st_size
    alone = predict_memory(text, FitSettings(n_ctx=256))
    with_it = predict_memory(text, FitSettings(n_ctx=256, projector_bytes=size))
    assert with_it.ram == alone.ram + size
    offloaded = predict_memory(text, FitSettings(n_ctx=256, n_gpu_layers=-1, projector_bytes=size))
    assert offloaded.vram == predict_memory(text, FitSettings(n_ctx=256, n_gpu_layers=-1)).vram + size
