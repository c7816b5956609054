"""What a whole-vocabulary token mask costs, on SmolLM2's vocabulary and a Qwen-sized one.

llguidance computes the mask of every token the grammar allows next. Check-first sampling
asks it only about the sampled token (``validate_tokens``) and computes the full mask only
when that token is refused, so both costs are measured, at every position of valid
replies to the structured-output schemas (tests/models/structured_schemas.py), fed token
by token as a model would write them:

- SmolLM2-135M-Instruct's own vocabulary (49,152 tokens, from the GGUF);
- Qwen's own vocabulary (151,643 tokens, 6.4 bytes a token; ``large_vocab.qwen_tokens``,
  from a PyPI package), padded with its special tokens to Qwen2.5's 152,064;
- 152,064 tokens made from SmolLM2's (``large_vocab.merged_tokens``: pairs of its tokens,
  9.5 bytes a token), a harsher trie than the real one.

Prints, per vocabulary, the mean / median / 99th percentile / largest full-mask time and
the mean check-first time in milliseconds (each position's fastest of ``--rounds`` fresh
replies), and the ratio of the 152k to the 49k mask time. No llama.cpp needed: the
vocabulary is read from the GGUF with ``gguf``.

Run: .venv/bin/python tests/benchmarks/bench_mask_cost.py [--model SmolLM2.gguf] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.benchmarks.large_vocab import LARGE_VOCAB, gguf_tokens, merged_tokens, qwen_tokens  # noqa: E402

EXAMPLES = {
    "person": {"name": "Anna Schmidt", "age": 34},
    "nested-address": {"shop": "Bäckerei Müller", "address": {"street": "Hauptstraße 12",
                                                               "city": "Berlin", "zip": "10115"}},
    "array-of-objects": {"items": [{"name": "milk", "qty": 2}, {"name": "eggs", "qty": 12}]},
    "recursive-ref": {"name": "Ann", "children": [{"name": "Bo", "children": []}]},
    "datetime-uuid": {"id": "123e4567-e89b-12d3-a456-426614174000",
                      "timestamp": "2024-05-03T14:30:00Z"},
    "bounded-numbers": {"celsius": -12.5, "humidity": 0.25},
    "any-json": {"cat": {"name": "Felix", "tags": [1, -2.5, None, True], "x": {}}},
}


class Vocabulary:
    """A token list for llguidance's ``TokenizerWrapper`` (bytes per token, an end token)."""

    def __init__(self, tokens: list[bytes], eos: int) -> None:
        self.tokens = tokens
        self.eos_token_id = eos
        self.bos_token_id = None
        self.special_token_ids = [eos]
        self._longest = max(len(t) for t in tokens)
        self._ids = {t: i for i, t in enumerate(tokens) if t and not t.startswith(b"\xff")}

    def __call__(self, text: bytes) -> list[int]:
        """Greedy longest-match tokenization (enough to feed a reply)."""
        out, i = [], 0
        while i < len(text):
            for n in range(min(self._longest, len(text) - i), 0, -1):
                token = self._ids.get(text[i:i + n])
                if token is not None:
                    out.append(token)
                    i += n
                    break
            else:
                raise ValueError(f"no token for byte {text[i]}")
        return out


def smollm2_tokens(model: Path) -> tuple[list[bytes], int]:
    """The GGUF's tokens as bytes (read with gguf, no llama.cpp), control tokens marked the
    way llguidance expects (a 0xff byte first), and the end-of-sequence token."""
    import gguf

    reader = gguf.GGUFReader(str(model))
    eos = int(reader.fields["tokenizer.ggml.eos_token_id"].parts[-1][0])
    return gguf_tokens(reader), eos


def measure(tokenizer, vocab: Vocabulary, cases: dict, rounds: int) -> dict:
    """Mask and check-first times at every position of every case's reply. Each round
    starts fresh matchers (llguidance builds lexer states lazily, so a new reply pays for
    the states it meets first, as a real reply does); each position keeps its fastest
    round, since other load on the machine only adds time."""
    from llguidance import LLMatcher

    from models.structured import plan_schema

    mask = np.zeros((len(vocab.tokens) + 31) // 32, dtype=np.int32)
    best: dict = {}
    for _ in range(rounds):
        for name, (schema, value) in cases.items():
            grammar = plan_schema(schema).grammar
            matcher = LLMatcher(tokenizer, grammar, log_level=0)
            text = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
            for position, token in enumerate(vocab(text)):
                started = time.perf_counter()
                matcher.unsafe_compute_mask_ptr(mask.ctypes.data, mask.nbytes)
                full = time.perf_counter() - started
                started = time.perf_counter()
                allowed = matcher.validate_tokens([token])
                check = time.perf_counter() - started
                assert allowed == 1 and matcher.consume_token(token), name
                old = best.get((name, position), (full, check))
                best[name, position] = (min(old[0], full), min(old[1], check))
            assert matcher.is_accepting(), name
    full_ms = sorted(1000 * f for f, _ in best.values())
    return {"masks": len(full_ms), "mean": statistics.fmean(full_ms),
            "median": statistics.median(full_ms), "p99": full_ms[int(0.99 * len(full_ms))],
            "max": full_ms[-1], "check": 1000 * statistics.fmean(c for _, c in best.values())}


def main(argv=None) -> int:
    from llguidance import LLTokenizer, TokenizerWrapper

    from tests.conftest import cached_models_dir, fetch_smollm2
    from tests.models.structured_schemas import SUPPORTED

    parser = argparse.ArgumentParser()
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    model = args.model or fetch_smollm2(cached_models_dir())
    cases = {name: (SUPPORTED[name][1], value) for name, value in EXAMPLES.items()}
    base, eos = smollm2_tokens(model)
    rows = {}
    qwen = qwen_tokens(cached_models_dir())
    qwen_eos = len(qwen)
    qwen = qwen + [b"\xff<|extra_%d|>" % i for i in range(LARGE_VOCAB - len(qwen))]
    vocabularies = (("SmolLM2 49,152", base, eos), (f"Qwen {LARGE_VOCAB:,}", qwen, qwen_eos),
                    (f"merged {LARGE_VOCAB:,}", merged_tokens(base, LARGE_VOCAB), eos))
    for label, tokens, end in vocabularies:
        vocab = Vocabulary(tokens, end)
        started = time.perf_counter()
        tokenizer = LLTokenizer(TokenizerWrapper(vocab))
        built = time.perf_counter() - started
        rows[label] = measure(tokenizer, vocab, cases, args.rounds)
        r = rows[label]
        mean_bytes = statistics.fmean(len(t) for t in tokens if not t.startswith(b"\xff"))
        print(f"{label:>16} ({mean_bytes:.1f} bytes a token): {r['masks']} positions, full mask mean {r['mean']:.3f} ms, "
              f"median {r['median']:.3f}, p99 {r['p99']:.3f}, max {r['max']:.3f}; check-first "
              f"{r['check'] * 1000:.1f} µs; tokenizer built in {built:.1f} s", flush=True)
    small, *large = rows.values()
    for label, row in zip(list(rows)[1:], large):
        print(f"{label} / SmolLM2 full-mask time: mean {row['mean'] / small['mean']:.2f}x, "
              f"p99 {row['p99'] / small['p99']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
