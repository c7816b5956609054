"""Our GBNF reader against llama.cpp's own parser and sampler, on generated grammars.

The oracle (tests/models/gbnf_oracle.py, a subprocess with SmolLM2's vocabulary) says
whether llama.cpp accepts each grammar and, for each text, whether its grammar sampler
lets exactly that text through and then allows the end. Our verdicts must be the same,
grammar by grammar and text by text. Grammars llama.cpp would hang on are refused by us
and never sent (counted separately).
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from collections import Counter

import pytest

from app.core.errors import QuantDeskError
from models.structured import gbnf
from models.structured.gbnf import GrammarMatcher, parse_gbnf
from tests.conftest import REPO_ROOT
from tests.models.gbnf_corpus import GrammarGenerator, random_texts, sample_texts

pytestmark = pytest.mark.smollm2

GRAMMARS = 1000

# Hand-written cases for the facts the reader carries over from llama-grammar.cpp.
EXPLICIT = [
    ('root ::= "ab"*\n', ["", "ab", "abab", "abbb", "a"]),
    ('root ::= "é\\x41"{2}\n', ["éAéA", "éAA", "éA"]),
    ('root ::= [] "a"\n', ["a", ""]),
    ('root ::= "a"{2}*\n', ["", "aa", "aaaa", "aaa"]),
    ('root ::= "a"\nroot ::= "b"\n', ["a", "b"]),
    ('root ::= ("a"\n | "b")+\n', ["ab", "ba", ""]),
    ('root ::= "a" {\n2}\n', []),
    ('root ::= ""*\n', []),
    ('root ::= "a"{0}+\n', []),
    ('root ::= "a"{0,2500} "b"\n', ["b", "aaab"]),
    ('root ::= "a"{2001}\n', []),
    ('root ::= ("a"{0,45}){0,45}\n', []),
    ('root ::= x "a"\nx ::= x "b" | ""\n', []),
    ('root ::= x "a"\nx ::= y x\ny ::= z\nz ::= ""\n', []),  # a loop in tail position: harmless
    ('root ::= x "a"\nx ::= y x "b" | "c"\ny ::= z\nz ::= ""\n', []),  # grows: llama.cpp hangs
    ('root ::= [^]x\nx ::= "y"\n', ["y", "xy"]),
]


def _ours(grammar: str, texts: list[str]):
    try:
        parsed = parse_gbnf(grammar)
    except QuantDeskError:
        return None
    verdicts = []
    for text in texts:
        matcher = GrammarMatcher(parsed)
        try:
            matcher.feed(text)
            verdicts.append(matcher.can_end)
        except ValueError:
            verdicts.append(False)
    return verdicts


def _would_hang(text: str) -> bool:
    """Grammars llama.cpp loops on: {m,n} with n < m, or growing left recursion it misses."""
    if any(int(a) > int(b) for a, b in re.findall(r"\{\s*(\d+)\s*,\s*(\d+)\s*\}", text)):
        return True
    try:
        grammar = gbnf._Parser(text.split("\0", 1)[0]).parse()
    except QuantDeskError:
        return False
    return gbnf._growing_left_recursion(grammar) is not None and gbnf._llama_left_recursion(grammar) is None


def _llama(model, cases: list[dict]) -> list:
    result = subprocess.run([sys.executable, "-m", "tests.models.gbnf_oracle", str(model)],
                            input=json.dumps(cases), cwd=REPO_ROOT, capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_reader_accepts_and_rejects_exactly_as_llama_cpp(smollm2_gguf):
    generator, r = GrammarGenerator(15), random.Random(15)
    cases, ours, skipped = [], [], 0
    for grammar, texts in EXPLICIT:
        if _would_hang(grammar):
            assert _ours(grammar, texts) is None  # refused with a sentence
            skipped += 1
            continue
        cases.append({"grammar": grammar, "texts": texts})
        ours.append(_ours(grammar, texts))
    while len(cases) < GRAMMARS + len(EXPLICIT) - skipped:
        grammar = generator.case()
        if _would_hang(grammar):
            assert _ours(grammar, []) is None
            skipped += 1
            continue
        try:
            parsed = parse_gbnf(grammar)
            texts = list(dict.fromkeys(sample_texts(parsed, r, 4) + random_texts(r, 3)))
        except QuantDeskError:
            texts = []
        cases.append({"grammar": grammar, "texts": texts})
        ours.append(_ours(grammar, texts))
    theirs = _llama(smollm2_gguf, cases)
    counts, mismatches = Counter(), []
    for case, mine, llama in zip(cases, ours, theirs):
        counts["accepted" if llama is not None else "refused"] += 1
        if (mine is None) != (llama is None) or (mine is not None and mine != llama):
            mismatches.append((case["grammar"], case["texts"], mine, llama))
        elif mine is not None:
            counts["texts"] += len(mine)
            counts["texts allowed"] += sum(mine)
    print(f"grammars compared with llama.cpp: {len(cases)} ({dict(counts)}), never sent (would "
          f"hang llama.cpp, refused by us): {skipped}, mismatches: {len(mismatches)}")
    assert mismatches == []
    assert len(cases) >= GRAMMARS
    assert counts["accepted"] > 0.4 * GRAMMARS and counts["refused"] > 0.1 * GRAMMARS, counts
    assert counts["texts"] > 3 * GRAMMARS and 0.2 < counts["texts allowed"] / counts["texts"] < 0.8, counts
