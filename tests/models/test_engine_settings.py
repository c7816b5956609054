"""Load settings and their rules; the GGUF header facts they are checked against.

Oracles: ``gguf.GGUFReader`` for the header facts, llama.cpp itself (in a child process)
for the KV-cache rule that quantized V needs flash attention.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from models.engine.gguf_info import read_model_info
from models.engine.settings import LoadSettings, gpu_device_count, validate_settings
from models.foundation.errors import QuantDeskError


@pytest.fixture(scope="module")
def smollm2_info(smollm2_gguf):
    return read_model_info(smollm2_gguf)


@pytest.mark.smollm2
def test_header_facts_match_gguf_reader(smollm2_gguf, smollm2_info):
    from gguf import GGUFReader

    reader = GGUFReader(smollm2_gguf)
    field = lambda key: reader.fields[key].contents()  # noqa: E731
    assert smollm2_info.architecture == field("general.architecture") == "llama"
    assert smollm2_info.block_count == field("llama.block_count") == 30
    assert smollm2_info.max_gpu_layers == 31
    assert smollm2_info.context_length == field("llama.context_length")
    assert smollm2_info.head_size_k == field("llama.embedding_length") // field(
        "llama.attention.head_count")
    assert smollm2_info.chat_template == field("tokenizer.chat_template")
    tensors = {t.name: int(t.n_bytes) for t in reader.tensors}
    # Tied embeddings (no output.weight): every decode step multiplies by token_embd.
    assert "output.weight" not in tensors
    assert smollm2_info.weight_bytes_per_token == sum(tensors.values())


def test_unreadable_files_are_refused_with_a_sentence(tmp_path):
    with pytest.raises(QuantDeskError, match="does not exist"):
        read_model_info(tmp_path / "missing.gguf")
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf file at all")
    with pytest.raises(QuantDeskError, match="junk.gguf"):
        read_model_info(junk)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x01" * 12)
    with pytest.raises(QuantDeskError, match="cut.gguf"):
        read_model_info(cut)


def test_this_machine_has_no_gpu():
    from models.hardware import devices

    assert gpu_device_count(devices()) == 0


@pytest.mark.smollm2
def test_auto_values_are_resolved(smollm2_info):
    resolved = validate_settings(LoadSettings(context_length=0), smollm2_info, gpu_count=0,
                                 cpu_count=8)
    assert resolved.gpu_layers == 0  # "all" of no GPU
    assert resolved.context_length == 8192
    assert (resolved.threads, resolved.batch_threads) == (4, 8)
    with_gpu = validate_settings(LoadSettings(), smollm2_info, gpu_count=1, cpu_count=8)
    assert with_gpu.gpu_layers == 31


BAD_SETTINGS = [
    (dict(gpu_layers=5), 0, "sees no GPU"),
    (dict(gpu_layers=32), 1, "outside 0…31"),
    (dict(gpu_layers=-2), 1, "outside"),
    (dict(main_gpu=1, gpu_layers=4), 1, "main GPU"),
    (dict(threads=0), 0, "threads"),
    (dict(context_length=9000), 0, "trained for 8192"),
    (dict(context_length=16), 0, "context length"),
    (dict(batch_size=256, micro_batch_size=512), 0, "is larger than the batch size"),
    (dict(kv_cache_type_v="q8_0"), 0, "needs flash attention"),
    (dict(kv_cache_type_v="q4_0", kv_cache_type_k="q4_0"), 0, "needs flash attention"),
    (dict(kv_cache_type_k="q5_k"), 0, "not one QuantDesk offers"),
    (dict(use_mmap="yes"), 0, "on or off"),
    (dict(batch_size=1.5), 0, "whole number"),
]


@pytest.mark.smollm2
@pytest.mark.parametrize("changes, gpus, message", BAD_SETTINGS)
def test_invalid_settings_are_refused_with_a_sentence(smollm2_info, changes, gpus, message):
    with pytest.raises(QuantDeskError, match=message) as info:
        validate_settings(LoadSettings(**changes), smollm2_info, gpu_count=gpus, cpu_count=2)
    assert info.value.fix  # every refusal says what to do


@pytest.mark.smollm2
def test_quantized_k_cache_needs_heads_in_whole_blocks(smollm2_info):
    odd_heads = dataclasses.replace(smollm2_info, head_size_k=80)
    settings = LoadSettings(flash_attention=True, kv_cache_type_k="q8_0")
    validate_settings(settings, smollm2_info, gpu_count=0)
    with pytest.raises(QuantDeskError, match="heads of 80 values"):
        validate_settings(settings, odd_heads, gpu_count=0)


LLAMA_CONTEXT = r"""
import sys, llama_cpp
try:
    llama_cpp.Llama(model_path=sys.argv[1], n_ctx=256, n_threads=2, verbose=False,
                    type_v=8, flash_attn=sys.argv[2] == "on")
    print("created")
except ValueError as exc:
    print("refused", exc)
"""


@pytest.mark.smollm2
@pytest.mark.parametrize("flash", ["off", "on"])
def test_the_v_cache_rule_is_llama_cpps_own(smollm2_gguf, smollm2_info, flash):
    """Our validator refuses exactly what llama.cpp refuses: a q8_0 V cache without FA."""
    result = subprocess.run([sys.executable, "-c", LLAMA_CONTEXT, str(smollm2_gguf), flash],
                            capture_output=True, text=True, timeout=120)
    llama_accepts = result.stdout.strip().startswith("created")
    settings = LoadSettings(flash_attention=flash == "on", kv_cache_type_v="q8_0")
    try:
        validate_settings(settings, smollm2_info, gpu_count=0)
        we_accept = True
    except QuantDeskError:
        we_accept = False
    assert we_accept == llama_accepts == (flash == "on"), result.stdout + result.stderr[-500:]


def test_settings_round_trip_through_plain_values():
    settings = LoadSettings(gpu_layers=3, flash_attention=True, kv_cache_type_k="q4_0")
    assert LoadSettings.from_dict(settings.to_dict() | {"unknown": 1}) == settings
