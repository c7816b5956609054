"""The engine on tiny models converted by QuantDesk's own converter (seconds, no download).

Each family's tiny checkpoint (tests/factory) is converted to an F16 GGUF, loaded in the
engine, and its greedy reply compared with llama-cpp-python on the same file: the prompt
rendered by llama-cpp-python's ``Jinja2ChatFormatter``, tokenized (BOS added as llama-server
adds it), and decoded greedily
with ``Llama.generate`` must give the same prompt tokens and the same reply. (``create_chat_completion`` itself is no oracle here: random weights produce
invalid UTF-8, for which it counts and drops bytes its own way.)
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from models.engine import ChatOptions, EngineClient, LoadSettings
from quantize.convert.convert import convert
from tests.factory.checkpoints import write_tiny_checkpoint

RAW_GENERATE = r"""
import json, sys
import llama_cpp
from llama_cpp.llama_chat_format import Jinja2ChatFormatter
llm = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=256, n_threads=2, verbose=False)
vocab = llama_cpp.llama_model_get_vocab(llm.model)
text = lambda t: llama_cpp.llama_vocab_get_text(vocab, t).decode() if t >= 0 else ""
prompt = Jinja2ChatFormatter(llm.metadata["tokenizer.chat_template"], eos_token=text(llm.token_eos()),
                             bos_token=text(llm.token_bos()))(messages=json.loads(sys.argv[2])).prompt
# BOS once when the GGUF asks for it and the template did not write it (llama-server's rule;
# llama-cpp-python's create_chat_completion never adds it, which drops BOS for e.g. Phi-3).
bos = text(llm.token_bos())
add_bos = bool(llama_cpp.llama_vocab_get_add_bos(vocab)) and not (bos and prompt.startswith(bos))
tokens = llm.tokenize(prompt.encode(), add_bos=add_bos, special=True)
reply = []
for token in llm.generate(tokens, temp=0.0):
    if llama_cpp.llama_vocab_is_eog(vocab, token) or len(reply) == int(sys.argv[3]):
        break
    reply.append(token)
print(json.dumps({"prompt_tokens": len(tokens), "completion_tokens": len(reply),
                  "text": llm.detokenize(reply).decode("utf-8", errors="replace")}))
"""


def raw_generate(model, messages, max_tokens):
    result = subprocess.run([sys.executable, "-c", RAW_GENERATE, str(model), json.dumps(messages),
                             str(max_tokens)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


MESSAGES = [{"role": "system", "content": "You are terse."},
            {"role": "user", "content": "hello world, how are you?"}]


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3", "tinyllama", "mistral", "gemma2", "phi3"])
def test_tiny_converted_model_chats_like_llama_cpp_python(tmp_path, arch):
    write_tiny_checkpoint(tmp_path / "hf", arch=arch)
    model = convert(tmp_path / "hf", tmp_path / f"{arch}.gguf", "f16")
    with EngineClient() as client:
        report = client.load(model, LoadSettings(threads=2, batch_threads=2, context_length=256))
        assert report.template == "the model's own"
        assert report.offload.layers_total == report.model.block_count + 1
        reply = client.chat(MESSAGES, ChatOptions(temperature=0.0, max_tokens=12)).wait()
        history = MESSAGES + [{"role": "assistant", "content": reply.text},
                              {"role": "user", "content": "again"}]
        again = client.chat(history, ChatOptions(temperature=0.0, max_tokens=4)).wait()
    oracle = raw_generate(model, MESSAGES, 12)
    assert reply.stats.prompt_tokens == oracle["prompt_tokens"]
    assert reply.stats.completion_tokens == oracle["completion_tokens"]
    assert reply.text == oracle["text"]
    assert again.stats.prompt_tokens_reused >= reply.stats.prompt_tokens
