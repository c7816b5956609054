"""Structured output on the real SmolLM2: every reply parses and validates; fast-forward.

Generation runs in a subprocess (tests/models/structured_runner.py) that loads the model
once for the module: a native fault must fail a test, not kill the run. The oracle is the
schema: every reply validated (llguidance's matcher also refuses any forced token its
grammar does not allow, which would end the run with an error).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from models.structured import constraint_for_schema
from tests.conftest import REPO_ROOT
from tests.models.conftest import TEST_THREADS
from tests.models.structured_schemas import SUPPORTED

pytestmark = [pytest.mark.smollm2]

@pytest.fixture(scope="module")
def replies(smollm2_gguf):
    """{(case, mode): reply row} for every schema, plain constrained and fast-forward."""
    result = subprocess.run(
        [sys.executable, "-m", "tests.models.structured_runner", str(smollm2_gguf),
         "--modes", "plain,ff", "--max-tokens", "120", "--threads", str(TEST_THREADS)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=3000)
    assert result.returncode == 0, (
        f"the generation process exited with {result.returncode} (negative: a signal, e.g. "
        f"llama.cpp aborting on a token its grammar rejects)\n{result.stderr[-3000:]}")
    rows = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    return {(row["case"], row["mode"]): row for row in rows}


@pytest.mark.slow
def test_every_reply_parses_and_validates(replies):
    assert len(SUPPORTED) >= 20
    failures = []
    for (case, mode), row in sorted(replies.items()):
        try:
            constraint_for_schema(SUPPORTED[case][1]).check(row["text"])
        except Exception as exc:  # noqa: BLE001 - collect every failure with its reason
            failures.append(f"{case}/{mode}: {exc} (stop: {row['stop']}) {row['text']!r}")
    assert len(replies) == 2 * len(SUPPORTED)
    assert failures == []
    # A reply the model had not finished within max_tokens is closed by the grammar's
    # shortest ending (flagged), never returned cut off.
    assert all(row["stop"] == "complete" for row in replies.values())
    closed = [case for (case, mode), row in replies.items() if row["closed"]]
    assert len(closed) <= 0.25 * len(replies), closed


@pytest.mark.slow
def test_fast_forward_appends_tokens_without_sampling(replies):
    ff = [row for (_, mode), row in replies.items() if mode == "ff"]
    plain = [row for (_, mode), row in replies.items() if mode == "plain"]
    forced = sum(row["forced"] for row in ff)
    total = sum(row["forced"] + row["sampled"] for row in ff)
    assert forced / total > 0.12, (forced, total)
    assert sum(row["sampled"] for row in ff) < sum(row["sampled"] for row in plain)
    # Plain decoding samples every token (closing at the budget narrows the mask only).
    assert all(row["forced"] == 0 for row in plain)


@pytest.mark.slow
def test_fast_forward_keeps_most_greedy_replies_identical(replies):
    """Forced text is tokenized canonically (``{"`` ``answer`` ``":``) where the model may
    pick other pieces (``{`` ``"`` ``answer``); the different context can change what a
    greedy model writes next (measured: not a batching effect, per-token decoding gives the
    same). Holding back the last forced token keeps most replies identical."""
    same = [case for case in SUPPORTED if replies[case, "ff"]["text"] == replies[case, "plain"]["text"]]
    assert len(same) >= 0.5 * len(SUPPORTED), sorted(set(SUPPORTED) - set(same))
