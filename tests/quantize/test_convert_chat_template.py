"""The chat template travels into the GGUF and formats prompts exactly as transformers does.

llama-cpp-python builds its chat formatter from the GGUF's ``tokenizer.chat_template``
and the texts of its BOS/EOS tokens; the prompt it produces must equal transformers'
``apply_chat_template`` on the original folder, for each family's template (ChatML,
Mistral ``[INST]``, Gemma turns, Phi-3 markers) and whether the template comes from
tokenizer_config.json or from chat_template.jinja.
"""

from __future__ import annotations

import json

import pytest

from quantize.convert import convert
from tests.factory.checkpoints import write_tiny_checkpoint
from tests.quantize.convert_oracles import hf_tokenizer, run_llama_cpp

pytest.importorskip("transformers")

CONVERSATIONS = {
    "llama": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi 你好 😀"},
              {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "2+2?"}],
    "mistral": [{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello."},
                {"role": "user", "content": "Tell me a joke"}],
    "gemma2": [{"role": "user", "content": "  Hi there  "}, {"role": "assistant", "content": "Hello."},
               {"role": "user", "content": "Bonjour ça va ?"}],
    "phi3": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
}
CONVERSATIONS["qwen2"] = CONVERSATIONS["llama"]


def _prompts(ck_path, gguf, messages, add_generation_prompt):
    theirs = hf_tokenizer(ck_path).apply_chat_template(messages, tokenize=False,
                                                       add_generation_prompt=add_generation_prompt)
    ours = run_llama_cpp({"kind": "chat", "model": str(gguf), "messages": messages,
                          "add_generation_prompt": add_generation_prompt})
    return ours, theirs


@pytest.mark.parametrize("arch", list(CONVERSATIONS))
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_chat_prompt_matches_transformers(tmp_path, arch, add_generation_prompt):
    ck = write_tiny_checkpoint(tmp_path / arch, arch=arch)
    gguf = convert(ck.path, tmp_path / "out.gguf", "f32")
    ours, theirs = _prompts(ck.path, gguf, CONVERSATIONS[arch], add_generation_prompt)
    assert ours["prompt"] == theirs
    assert CONVERSATIONS[arch][-1]["content"].strip() in theirs


def test_template_from_chat_template_jinja(tmp_path):
    """Newer Hub repos keep the template in chat_template.jinja, not tokenizer_config.json."""
    ck = write_tiny_checkpoint(tmp_path / "m", arch="gemma2")
    config_path = ck.path / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    (ck.path / "chat_template.jinja").write_text(config.pop("chat_template"))
    config_path.write_text(json.dumps(config))
    gguf = convert(ck.path, tmp_path / "out.gguf", "f32")
    ours, theirs = _prompts(ck.path, gguf, CONVERSATIONS["gemma2"], True)
    assert ours["prompt"] == theirs
    assert ours["bos"] == "<bos>" and theirs.startswith("<bos><start_of_turn>user\n")
