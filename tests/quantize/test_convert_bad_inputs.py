"""Bad checkpoints give a QuantDeskError sentence naming the problem, and leave no file.

Each case starts from a valid tiny checkpoint and breaks one thing the way downloads and
hand-made folders break: a missing config, an architecture we do not convert, pickle-only
weights, truncated or hostile safetensors headers, weights that disagree with the config.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from models.foundation.errors import Cancelled, QuantDeskError
from models.foundation.jobs import CancelToken
from quantize.convert import convert, open_hf_folder
from tests.factory.checkpoints import write_tiny_checkpoint


def _break_header(file: Path, mutate) -> None:
    """Rewrite a safetensors header through ``mutate(header_dict)``, keeping the data."""
    raw = file.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    mutate(header)
    new = json.dumps(header).encode()
    new += b" " * (-len(new) % 8)
    file.write_bytes(struct.pack("<Q", len(new)) + new + raw[8 + n:])


def _remove_config(ck):
    (ck.path / "config.json").unlink()


def _unsupported_arch(ck):
    config = json.loads((ck.path / "config.json").read_text())
    config["architectures"] = ["GPT2LMHeadModel"]
    (ck.path / "config.json").write_text(json.dumps(config))


def _pickle_only(ck):
    for f in ck.weight_files:
        f.unlink()
    (ck.path / "pytorch_model.bin").write_bytes(b"\x80\x04\x95")  # a pickle's first bytes


def _truncated(ck):
    file = ck.weight_files[0]
    file.write_bytes(file.read_bytes()[:-1000])


def _absurd_header_size(ck):
    file = ck.weight_files[0]
    file.write_bytes(struct.pack("<Q", 2**62) + file.read_bytes()[8:])


def _absurd_tensor_shape(ck):
    def grow(header):
        header["model.norm.weight"]["shape"] = [2**39, 2**39]
    _break_header(ck.weight_files[0], grow)


def _overlapping(ck):
    def overlap(header):
        names = [k for k in header if k != "__metadata__"]
        a, b = header[names[0]], header[names[1]]
        if a["data_offsets"][1] - a["data_offsets"][0] == b["data_offsets"][1] - b["data_offsets"][0]:
            b["data_offsets"] = list(a["data_offsets"])
        else:
            b["shape"], b["dtype"], b["data_offsets"] = a["shape"], a["dtype"], list(a["data_offsets"])
    _break_header(ck.weight_files[0], overlap)


def _not_json(ck):
    file = ck.weight_files[0]
    raw = file.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    file.write_bytes(raw[:8] + b"{" * n + raw[8 + n:])


def _shape_disagrees_with_config(ck):
    config = json.loads((ck.path / "config.json").read_text())
    config["intermediate_size"] = 96
    (ck.path / "config.json").write_text(json.dumps(config))


def _missing_shard(ck):
    ck.weight_files[-1].unlink()


def _layer_missing_tensor(ck):
    def drop(header):
        del header["model.layers.1.mlp.up_proj.weight"]
    _break_header(ck.weight_files[0], drop)


CASES = {
    "missing config": (_remove_config, 1, "no config.json"),
    "unsupported architecture": (_unsupported_arch, 1, "GPT2LMHeadModel model, which QuantDesk cannot convert"),
    "pickle-only checkpoint": (_pickle_only, 1, "pickle"),
    "truncated safetensors": (_truncated, 1, "truncated"),
    "absurd header size": (_absurd_header_size, 1, "header claims"),
    "absurd tensor shape": (_absurd_tensor_shape, 1, "model.norm.weight"),
    "overlapping tensors": (_overlapping, 1, "overlap"),
    "header not JSON": (_not_json, 1, "not JSON"),
    "shape disagrees with config": (_shape_disagrees_with_config, 1, "implies"),
    "missing shard": (_missing_shard, 3, "missing 1 weight shard"),
    "layer missing a tensor": (_layer_missing_tensor, 1, "lacks tensor"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_a_clear_error_and_leaves_no_file(tmp_path, case):
    breaker, shards, message = CASES[case]
    ck = write_tiny_checkpoint(tmp_path / "model", shards=shards)
    breaker(ck)
    before = set((tmp_path / "model").iterdir())
    out = tmp_path / "model" / "out.gguf"
    with pytest.raises(QuantDeskError) as info:
        convert(ck.path, out, "f16")
    text = info.value.user_message
    assert message in text, text
    assert text.endswith(".") and len(text) < 700
    assert not out.exists()
    assert set((tmp_path / "model").iterdir()) == before  # no temporary file left either


def test_error_names_the_damaged_file(tmp_path):
    ck = write_tiny_checkpoint(tmp_path / "model", shards=3)
    _truncated(ck)
    with pytest.raises(QuantDeskError, match=ck.weight_files[0].name):
        open_hf_folder(ck.path)


def test_cancel_leaves_no_file(tmp_path):
    ck = write_tiny_checkpoint(tmp_path / "model")
    token, seen = CancelToken(), []

    def report(progress):
        seen.append(progress)
        token.cancel()  # cancel as soon as the first tensor is written

    out = tmp_path / "out.gguf"
    with pytest.raises(Cancelled):
        convert(ck.path, out, "f16", report=report, cancel=token)
    assert seen and not out.exists()
    assert list(tmp_path.glob(".out.gguf*")) == []
