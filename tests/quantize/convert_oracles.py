"""Oracles for converter tests: llama.cpp in a child process, transformers on CPU.

llama.cpp can abort the process (GGML_ASSERT) on a file it dislikes, so every llama.cpp
call runs in a child Python that prints one JSON line; a crash becomes a test failure
with llama.cpp's stderr instead of killing the test run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

_CHILD = r"""
import json, sys
import numpy as np
import llama_cpp
job = json.loads(sys.stdin.read())
kind = job["kind"]
if kind == "logits":
    llm = llama_cpp.Llama(model_path=job["model"], n_ctx=256, n_batch=256, n_threads=2,
                          logits_all=True, verbose=False, seed=0,
                          type_k=job.get("kv_type", 0), type_v=job.get("kv_type", 0))
    llm.eval(job["ids"])
    out = {"logits": np.asarray(llm.scores[: len(job["ids"])], dtype=np.float64).tolist()}
elif kind == "tokenize":
    llm = llama_cpp.Llama(model_path=job["model"], vocab_only=True, verbose=False)
    out = {"ids": [llm.tokenize(t.encode("utf-8"), add_bos=job["add_bos"], special=True)
                   for t in job["texts"]]}
elif kind == "chat":
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter
    llm = llama_cpp.Llama(model_path=job["model"], vocab_only=True, verbose=False)
    meta = llm.metadata
    tok = lambda key: llm._model.token_get_text(int(meta[key])) if key in meta else ""
    formatter = Jinja2ChatFormatter(template=meta["tokenizer.chat_template"],
                                    bos_token=tok("tokenizer.ggml.bos_token_id"),
                                    eos_token=tok("tokenizer.ggml.eos_token_id"),
                                    add_generation_prompt=job["add_generation_prompt"])
    out = {"prompt": formatter(messages=job["messages"]).prompt, "bos": tok("tokenizer.ggml.bos_token_id"),
           "eos": tok("tokenizer.ggml.eos_token_id")}
print("RESULT " + json.dumps(out))
"""


def run_llama_cpp(job: dict, timeout: float = 300) -> dict:
    """Run one llama.cpp job (logits / tokenize / chat) in a child process."""
    proc = subprocess.run([sys.executable, "-c", _CHILD], input=json.dumps(job), capture_output=True,
                          text=True, timeout=timeout)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise AssertionError(f"llama.cpp child exited with {proc.returncode}:\n{proc.stderr[-4000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def llama_cpp_logits(model: Path, ids: list[int]) -> np.ndarray:
    return np.asarray(run_llama_cpp({"kind": "logits", "model": str(model), "ids": ids})["logits"])


def _gelu_like_ggml_cpu(act):
    """llama.cpp's CPU GELU: input rounded to F16, result read from an F16 table.

    ggml-cpu/vec.h defines GGML_GELU_FP16, so ``ggml_vec_gelu_f32`` looks each value up in
    a 65536-entry F16 table (|x| >= 10 short-cuts to 0 or x). Applying the same rounding
    to transformers' activation leaves only the conversion to compare.
    """
    import torch

    class GeluLikeGgml(torch.nn.Module):
        def forward(self, x):
            y = act(x.to(torch.float16).to(torch.float32)).to(torch.float16).to(torch.float32)
            y = torch.where(x >= 10, x, y)
            return torch.where(x <= -10, torch.zeros_like(x), y)

    return GeluLikeGgml()


def hf_logits(model_dir: Path, ids: list[int], round_weights_to: str | None = None,
              ggml_gelu: bool = False) -> np.ndarray:
    """transformers' float32 logits for ``ids`` on the checkpoint in ``model_dir``.

    ``round_weights_to="float16"/"bfloat16"`` first rounds every matrix (not norms or
    biases, which the converter keeps in F32) to that type and back, so the reference has
    the same weights as an F16/BF16 GGUF and the remaining gap is llama.cpp's arithmetic.
    ``ggml_gelu`` makes GELU round like llama.cpp's CPU kernel (Gemma's MLP).
    """
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    if round_weights_to:
        target = getattr(torch, round_weights_to)
        with torch.no_grad():
            for name, param in model.named_parameters():
                if param.ndim >= 2:
                    param.copy_(param.to(target).to(torch.float32))
    if ggml_gelu:
        for module in model.modules():
            if hasattr(module, "act_fn") and "gelu" in type(module.act_fn).__name__.lower():
                module.act_fn = _gelu_like_ggml_cpu(module.act_fn)
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].double().numpy()


def hf_tokenizer(model_dir: Path):
    import transformers

    return transformers.AutoTokenizer.from_pretrained(model_dir)
