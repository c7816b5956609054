"""The factory's tiny checkpoints are valid Hugging Face checkpoints.

safetensors and tokenizers read them, and transformers loads the model and tokenizer and
runs a forward pass, exactly as it would a model downloaded from the Hub.
"""

import json

import numpy as np
import pytest
from safetensors import safe_open
from tokenizers import Tokenizer

from tests.factory.checkpoints import write_tiny_checkpoint

MULTILINGUAL = "Hello world! 123 4567 😀 你好 Grüße\n\n    def f(x): return x"


@pytest.mark.parametrize("dtype,shards", [("float32", 1), ("float16", 1), ("bfloat16", 3)])
def test_safetensors_and_tokenizer_load(tmp_path, dtype, shards):
    ck = write_tiny_checkpoint(tmp_path, dtype=dtype, shards=shards)
    files = sorted(tmp_path.glob("*.safetensors"))
    assert len(files) == shards
    seen = {}
    for file in files:
        with safe_open(str(file), framework="np" if dtype != "bfloat16" else "pt") as f:
            for name in f.keys():
                seen[name] = tuple(f.get_slice(name).get_shape())
    assert seen == ck.tensor_shapes
    if shards > 1:
        index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
        assert set(index["weight_map"]) == set(ck.tensor_shapes)

    tok = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    assert tok.get_vocab_size() == ck.config["vocab_size"]
    assert tok.decode(tok.encode(MULTILINGUAL).ids) == MULTILINGUAL  # byte-level: lossless
    assert tok.token_to_id("<|im_end|>") == ck.config["eos_token_id"]


def test_bf16_storage_rounds_like_torch(tmp_path):
    torch = pytest.importorskip("torch")
    from tests.factory.safetensors_writer import to_bf16_bits

    values = np.random.default_rng(1).standard_normal(4096).astype(np.float32)
    ours = to_bf16_bits(values)
    theirs = torch.from_numpy(values).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    assert np.array_equal(ours, theirs)


@pytest.mark.parametrize("dtype,tied", [("float32", False), ("bfloat16", True)])
def test_transformers_loads_and_runs_the_checkpoint(tmp_path, dtype, tied):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    ck = write_tiny_checkpoint(tmp_path, dtype=dtype, tie_word_embeddings=tied, shards=2)
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path)
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert str(model.dtype) == f"torch.{dtype}"
    ids = tok(MULTILINGUAL, return_tensors="pt").input_ids
    with torch.no_grad():
        logits = model(ids).logits
    assert logits.shape == (1, ids.shape[1], ck.config["vocab_size"])
    assert torch.isfinite(logits).all() and logits.float().std() > 0
    prompt = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                     add_generation_prompt=True)
    assert prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
