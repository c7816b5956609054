"""libmtmd's own helper as the oracle of a prompt with images: ``mtmd_helper_eval_chunks``
evaluates the whole prompt in one call, counting positions itself (M-RoPE images take
fewer positions than tokens), then greedy tokens are decoded one by one after it.

It runs in a child process (llama.cpp can abort), with the model and its mmproj loaded
the plain way, and prints the prompt's token count, the tokens' bytes and their
log-probabilities as one JSON line.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

_CHILD = r"""
import ctypes, json, sys
import numpy as np
import llama_cpp
from llama_cpp import mtmd_cpp as mtmd
job = json.loads(sys.stdin.read())
llm = llama_cpp.Llama(model_path=job["model"], n_ctx=512, n_batch=512, n_ubatch=512, n_threads=2,
                      verbose=False)
params = mtmd.mtmd_context_params_default()
params.use_gpu, params.n_threads, params.print_timings = False, 2, False
ctx = mtmd.mtmd_init_from_file(job["mmproj"].encode(), llm.model, params)
bitmaps = []
for path in job["images"]:
    data = open(path, "rb").read()
    buffer = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
    bitmaps.append(mtmd.mtmd_helper_bitmap_init_from_buf(ctx, buffer, len(data), False))
raw = job["prompt"].encode()
text = mtmd.mtmd_input_text(raw, len(raw), job["add_special"], True)
chunks = mtmd.mtmd_input_chunks_init()
array = (mtmd.mtmd_bitmap_p_ctypes * len(bitmaps))(*bitmaps)
assert mtmd.mtmd_tokenize(ctx, chunks, ctypes.byref(text), array, len(bitmaps)) == 0
layout = []
for i in range(mtmd.mtmd_input_chunks_size(chunks)):
    chunk = mtmd.mtmd_input_chunks_get(chunks, i)
    if mtmd.mtmd_input_chunk_get_type(chunk) == mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT:
        count = ctypes.c_size_t(0)
        tokens = mtmd.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(count))
        layout.append({"text": [tokens[k] for k in range(count.value)]})
    else:
        image = mtmd.mtmd_input_chunk_get_tokens_image(chunk)
        layout.append({"image": mtmd.mtmd_input_chunk_get_n_tokens(chunk),
                       "nx": mtmd.mtmd_image_tokens_get_nx(image), "ny": mtmd.mtmd_image_tokens_get_ny(image)})
n_past = llama_cpp.llama_pos(0)
assert mtmd.mtmd_helper_eval_chunks(ctx, llm.ctx, chunks, 0, 0, 512, True, ctypes.byref(n_past)) == 0
vocab = llama_cpp.llama_model_get_vocab(llm.model)
n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
out = {"prompt_tokens": mtmd.mtmd_helper_get_n_tokens(chunks), "positions": n_past.value,
       "pieces": [], "logprobs": [], "layout": layout}
position = n_past.value
for _ in range(job["count"]):
    logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(n_vocab,)).astype(np.float64)
    token = int(logits.argmax())
    peak = logits.max()
    out["logprobs"].append(float(logits[token] - peak - np.log(np.exp(logits - peak).sum())))
    buf = ctypes.create_string_buffer(64)
    size = llama_cpp.llama_token_to_piece(vocab, token, buf, 64, 0, True)
    out["pieces"].append(list(buf.raw[:size]))
    batch = llama_cpp.llama_batch_init(1, 0, 1)
    batch.n_tokens = 1
    batch.token[0], batch.pos[0], batch.n_seq_id[0], batch.logits[0] = token, position, 1, True
    batch.seq_id[0][0] = 0
    assert llama_cpp.llama_decode(llm.ctx, batch) == 0
    llama_cpp.llama_batch_free(batch)
    position += 1
print("RESULT " + json.dumps(out))
"""


def mtmd_greedy(model: Path, mmproj: Path, prompt: str, images: list[Path], count: int,
                add_special: bool = True) -> dict:
    """Greedy ``count`` tokens after ``prompt`` (one media marker per image), by libmtmd;
    also the prompt's ``layout``: ``{"text": ids}`` and ``{"image": n_tokens, "nx", "ny"}``
    chunks in order."""
    job = {"model": str(model), "mmproj": str(mmproj), "prompt": prompt, "images": [str(p) for p in images],
           "count": count, "add_special": add_special}
    proc = subprocess.run([sys.executable, "-c", _CHILD], input=json.dumps(job), capture_output=True,
                          text=True, timeout=300)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise AssertionError(f"libmtmd child exited with {proc.returncode}:\n{proc.stderr[-4000:]}")
    return json.loads(lines[-1][len("RESULT "):])


_EMBED_CHILD = r"""
import ctypes, json, sys
import numpy as np
import llama_cpp
from llama_cpp import mtmd_cpp as mtmd
job = json.loads(sys.stdin.read())
llm = llama_cpp.Llama(model_path=job["model"], n_ctx=256, n_threads=2, verbose=False)
params = mtmd.mtmd_context_params_default()
params.use_gpu, params.n_threads, params.print_timings = False, 2, False
ctx = mtmd.mtmd_init_from_file(job["mmproj"].encode(), llm.model, params)
data = open(job["image"], "rb").read()
buffer = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
bitmap = mtmd.mtmd_helper_bitmap_init_from_buf(ctx, buffer, len(data), False)
raw = mtmd.mtmd_default_marker()
text = mtmd.mtmd_input_text(raw, len(raw), False, True)
chunks = mtmd.mtmd_input_chunks_init()
array = (mtmd.mtmd_bitmap_p_ctypes * 1)(bitmap)
assert mtmd.mtmd_tokenize(ctx, chunks, ctypes.byref(text), array, 1) == 0
for i in range(mtmd.mtmd_input_chunks_size(chunks)):
    chunk = mtmd.mtmd_input_chunks_get(chunks, i)
    if mtmd.mtmd_input_chunk_get_type(chunk) != mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT:
        break
assert mtmd.mtmd_encode_chunk(ctx, chunk) == 0
n = mtmd.mtmd_input_chunk_get_n_tokens(chunk)
width = llama_cpp.llama_model_n_embd(llm.model)
values = np.ctypeslib.as_array(mtmd.mtmd_get_output_embd(ctx), shape=(n * width,)).reshape(n, width)
np.save(job["out"], values.astype(np.float32))
print("RESULT ok")
"""


def mtmd_image_embeddings(model: Path, mmproj: Path, image: Path, out: Path):
    """The embeddings libmtmd's vision encoder makes of ``image`` (tokens × text width)."""
    import numpy as np

    job = {"model": str(model), "mmproj": str(mmproj), "image": str(image), "out": str(out)}
    proc = subprocess.run([sys.executable, "-c", _EMBED_CHILD], input=json.dumps(job), capture_output=True,
                          text=True, timeout=300)
    if proc.returncode != 0 or "RESULT ok" not in proc.stdout:
        raise AssertionError(f"libmtmd child exited with {proc.returncode}:\n{proc.stderr[-4000:]}")
    return np.load(out)
