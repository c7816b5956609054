"""llama-cpp-python as installed decodes a real model on this machine.

DESIGN.md: a `-march=native` build segfaults on the first decode on CPUs that advertise
AMX inside some VMs. The decode runs in a child process so that such a crash fails this
test with its signal instead of killing the test run.
"""

import json
import subprocess
import sys

import pytest

DECODE = r"""
import json, sys
import llama_cpp
llm = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=256, n_threads=2, verbose=False, seed=0)
messages = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
a = llm.create_chat_completion(messages=messages, max_tokens=12, temperature=0.0)
b = llm.create_chat_completion(messages=messages, max_tokens=12, temperature=0.0)
print(json.dumps({
    "text": a["choices"][0]["message"]["content"],
    "again": b["choices"][0]["message"]["content"],
    "completion_tokens": a["usage"]["completion_tokens"],
    "prompt_tokens": a["usage"]["prompt_tokens"],
    "system_info": llama_cpp.llama_print_system_info().decode(),
}))
"""


@pytest.mark.smollm2
def test_smollm2_decodes_greedily_and_deterministically(smollm2_gguf):
    result = subprocess.run([sys.executable, "-c", DECODE, str(smollm2_gguf)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, (
        f"llama.cpp exited with {result.returncode} (a negative number is a signal: -11 is "
        f"the AMX segfault of DESIGN.md)\n{result.stderr[-3000:]}"
    )
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["completion_tokens"] > 0 and out["prompt_tokens"] > 5
    assert out["text"].strip(), out
    assert out["text"] == out["again"]
    assert "Paris" in out["text"], out["text"]
