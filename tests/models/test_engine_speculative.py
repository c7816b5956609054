"""Speculative decoding by prompt lookup in the engine's batch, with the real SmolLM2.

Oracle: the engine's own plain decoding (``speculative="off"``). Prompt lookup must give
the very same reply token for token (a draft token is kept only when the model's own pick
equals it) — greedy or sampled with a seed, alone or beside other replies in the batch,
free text or under a JSON Schema — and leave the KV cache and the saved session exactly as
plain decoding does, which the follow-up turns check by comparing with replies computed
from scratch.

The engine here uses flash attention: llama.cpp's plain attention rounds differently for a
batch of positions than for one (logits differ by up to ~0.8 on SmolLM2, measured with raw
llama-cpp-python), so there a greedy reply may legitimately differ at a near-tie.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from models.engine import ChatOptions, EngineClient, LoadSettings
from models.foundation.errors import QuantDeskError
from tests.models.conftest import FAST_SETTINGS

pytestmark = pytest.mark.smollm2

PARAGRAPH = ("Teh quick brown fox jumpd over the lazy dog near the rivr bank. Every mornign "
             "the fox ran along the path to the old mill, where the miller kept his grain in "
             "large wooden barels.")
EDIT = [{"role": "user", "content": "Fix the typos in this paragraph and return it:\n\n" + PARAGRAPH}]
FOLLOW_UP = {"role": "user", "content": "Now return the same paragraph again, unchanged."}
GREEDY = ChatOptions(temperature=0.0, max_tokens=64, speculative="off")
LOOKUP = ChatOptions(temperature=0.0, max_tokens=64)  # prompt lookup is the default
# A chat that shares only the template's system prefix with the others: it evicts them
# (the engine's prompt cache is off in this module, so nothing brings them back).
EVICT = [{"role": "user", "content": "Say hello."}]


@pytest.fixture(scope="module")
def smollm2_engine(smollm2_gguf):
    """SmolLM2 in an engine with flash attention (batch-independent rounding) and no prompt
    cache (the tests compare against replies computed from scratch)."""
    client = EngineClient(prompt_cache_bytes=0)
    client.load(smollm2_gguf, LoadSettings(**FAST_SETTINGS, flash_attention=True))
    yield client
    client.shutdown()


def _brute_force_draft(history: list[int], max_ngram: int, max_tokens: int,
                       min_ngram: int = 1, longest: int = 0) -> list[int]:
    """The longest tail that occurs earlier; of its places, the one matching furthest back
    (up to ``longest``), the latest on a tie; the tokens after it."""
    for size in range(min(max_ngram, len(history) - 1), min_ngram - 1, -1):
        tail = history[-size:]
        best, best_extent = -1, 0
        for start in range(len(history) - size - 1, -1, -1):
            if history[start: start + size] == tail:
                extent = size
                while (extent < longest and start + size - 1 - extent >= 0
                       and history[start + size - 1 - extent] == history[-1 - extent]):
                    extent += 1
                if extent > best_extent:
                    best, best_extent = start, extent
        if best >= 0:
            return history[best + size: best + size + max_tokens]
    return []


def test_lookup_matches_a_brute_force_search():
    from models.engine.prompt_lookup import find_match

    def find_draft(history, ngram, limit, least=1, longest=0):
        begin, _ = find_match(history, ngram, least, longest)
        return history[begin:begin + limit].tolist() if begin >= 0 and limit > 0 else []

    rng = np.random.default_rng(7)
    for _ in range(400):
        history = rng.integers(0, int(rng.integers(2, 7)), size=int(rng.integers(1, 60))).tolist()
        ngram, limit = int(rng.integers(1, 5)), int(rng.integers(0, 9))
        array = np.array(history, dtype=np.intc)
        for least, longest in ((1, 0), (2, 0), (1, 12), (2, 40)):
            expected = _brute_force_draft(history, ngram, limit, least, longest) if limit else []
            assert find_draft(array, ngram, limit, least, longest) == expected, (history, least,
                                                                                   longest)


def test_micro_batches_are_predicted_as_llama_cpp_splits_them():
    """Checked against llama.cpp's own split (LLAMA_BATCH_DEBUG=1 prints it): with a KV
    stream per sequence, equal tokens per sequence, of consecutive sequence ids."""
    from models.engine.speculation import ubatch_sizes

    assert ubatch_sizes([(0, 1), (1, 1), (2, 1), (3, 1)], 512, True) == [4]
    assert ubatch_sizes([(0, 5), (1, 1), (2, 1), (3, 1)], 512, True) == [4, 4]
    assert ubatch_sizes([(0, 5), (1, 1), (2, 5), (3, 1)], 512, True) == [4, 4, 4]
    assert ubatch_sizes([(0, 3), (1, 3), (2, 2), (3, 2)], 512, True) == [8, 2]
    assert ubatch_sizes([(0, 1), (2, 1), (3, 1)], 512, True) == [1, 2]  # a gap: two passes
    assert ubatch_sizes([(0, 300), (1, 300)], 512, True) == [512, 88]
    assert ubatch_sizes([(0, 5), (1, 1), (2, 1)], 512, False) == [7]  # one stream
    assert ubatch_sizes([(0, 600)], 512, False) == [512, 88]


def test_step_cost_is_fitted_from_step_times(monkeypatch):
    from models.engine.speculation import COST_ENV, FIRST_EXTRA_COST, StepCost

    monkeypatch.delenv(COST_ENV)  # the tests pin it (tests/conftest.py); measured here
    cost = StepCost()
    for _ in range(20):
        cost.add([1], 0.010)  # one-token steps only: nothing to fit the line with yet
    assert cost.extra == pytest.approx(FIRST_EXTRA_COST)
    assert cost.units([1]) == 1.0
    # A one-token step takes 10 ms; a micro-batch of several 9 ms plus 6 ms a token (the
    # matrix kernels: dearer for two tokens than the vector kernel for one, cheaper for
    # each further token than a step).
    for _ in range(20):
        for sizes in ([1], [4], [9], [17], [4, 4]):
            cost.add(sizes, 0.010 if sizes == [1] else
                     0.009 * len(sizes) + 0.006 * sum(sizes))
    assert cost.extra == pytest.approx(0.6, rel=0.01)
    assert cost.fixed == pytest.approx(0.9, rel=0.01)
    assert cost.units([1]) == 1.0
    assert cost.units([9]) == pytest.approx(0.9 + 5.4, rel=0.01)
    assert cost.units([4, 1]) == pytest.approx(0.9 + 2.4 + 1, rel=0.01)
    for _ in range(300):  # the machine got busy: each token costs as much as a step
        cost.add([1], 0.020)
        for sizes in ([3], [2, 2]):
            cost.add(sizes, 0.020 * sum(sizes))
    assert cost.extra == pytest.approx(1.0, rel=0.05)
    for _ in range(400):  # a reply alone, nothing drafted for long: back towards the
        cost.add([1], 0.040)  # first guess, so that drafting is tried (and measured) again
    assert cost.extra < 0.2
    fresh = StepCost()
    for _ in range(100):  # four replies, nothing drafted: one size of step, no line to fit
        fresh.add([4], 0.040)
    assert fresh.extra == pytest.approx(FIRST_EXTRA_COST)
    alone = StepCost()
    for _ in range(5):  # one reply drafts, always 4 tokens: the line through a one-token
        alone.add([1], 0.010)  # step and those
        alone.add([5], 0.034)
    assert alone.extra == pytest.approx(0.6, rel=0.01)
    assert alone.units([5]) == pytest.approx(3.4, rel=0.01)


def test_a_size_measured_is_priced_by_its_own_time(monkeypatch):
    """Matrix kernels cost no line at small sizes (F32 SmolLM2 at one thread: 2 tokens 1.49
    one-token steps, 65 tokens 17): a reply drafting 64 at a time must not price a 2-token
    draft by the line through its 65-token steps."""
    from models.engine.speculation import COST_ENV, HOPE, StepCost

    monkeypatch.delenv(COST_ENV)
    cost = StepCost()
    curve = {1: 1.0, 3: 1.3, 5: 2.6, 65: 17.0}
    for _ in range(30):
        for size in (1, 65, 65, 65, 65, 3, 5):
            cost.add([size], 0.040 * curve[size])
    line = cost.fixed + cost.per_token * 3
    assert line > 1.6  # the line, fitted mostly through 65-token steps, is dear at 3
    assert cost.units([3]) == pytest.approx(1.3, rel=0.05)
    assert cost.units([65]) == pytest.approx(17.0, rel=0.05)
    # A size not seen: between two measured, their times interpolated; past the longest
    # measured, its time and the line's per token, less the hope that makes it be tried.
    assert cost.units([6]) == pytest.approx(cost.units([5]) + (cost.units([65]) - cost.units([5])) / 60)
    # (at a power of two, hoped to be cheaper: the kernels' tiles)
    assert cost.units([4]) == pytest.approx((cost.units([3]) + cost.units([5])) / 2 * (1 - HOPE))
    assert cost.units([97]) == pytest.approx((cost.units([65]) + 32 * cost.per_token) * (1 - HOPE))
    for _ in range(400):  # nothing drafted for long: the sizes' own times are forgotten
        cost.add([1], 0.040)
    assert cost.units([3]) == pytest.approx(cost.fixed + cost.per_token * 3)


def test_a_size_that_may_pay_is_tried_then_priced_by_what_it_cost(monkeypatch):
    """CPU kernels are blocky (a micro-batch of 32 cheaper than one of 33): a reply copying
    in short drafts tries longer ones, a size at a time, and settles on what its machine
    runs cheapest — where long micro-batches are as dear as steps, back on short drafts."""
    from models.engine.speculation import COST_ENV, StepCost, best_length

    monkeypatch.delenv(COST_ENV)
    yields = np.concatenate(([1.0], 1.0 + np.cumsum(np.full(62, 0.99))))  # copying
    blocky = {1: 1.0, 4: 3.1, 32: 15.0, 33: 23.1}
    for curve, settled in ((blocky, 31), ({1: 1.0, 4: 3.1}, 3)):
        cost = StepCost()
        for _ in range(40):  # 3-token drafts so far: about 0.7 of a step a token
            for size in (1, 4):
                cost.add([size], 0.020 * curve[size])
        tried = []
        for _ in range(10):
            length = best_length(yields, cost)
            tried.append(length)
            for _ in range(2):  # (the first step of a size sets llama.cpp's graph up)
                cost.add([length + 1], 0.020 * curve.get(length + 1, length + 1))
        assert tried[0] == 62 and tried[-4:] == [settled] * 4, tried
        assert len(tried) - len(set(tried)) >= 4  # each size tried once, not again and again


def geometric(acceptance: float, longest: int) -> np.ndarray:
    """The yield table of drafts whose every token is kept with probability ``acceptance``."""
    return np.cumsum([acceptance ** k for k in range(longest + 1)])


def test_draft_length_pays_for_itself():
    from models.engine.speculation import StepCost, best_length

    cheap, dear, step = StepCost(), StepCost(), StepCost()
    cheap.extra, dear.extra, step.extra = 0.05, 0.3, 0.98
    assert best_length(geometric(0.98, 16), cheap) == 16  # copying, cheap tokens: long drafts
    assert 0 < best_length(geometric(0.9, 16), dear) < 16
    assert best_length(geometric(0.3, 16), dear) == 0  # guesses rarely kept: none at all
    assert best_length(geometric(0.9, 16), step) == 0  # a token as dear as a step: plain


def test_yields_follow_how_far_drafts_ran_position_by_position():
    """Copying, drafts are cut at a few places and the draft after a cut starts shakily:
    3-token drafts cut at their first token one time in eight, and kept whole otherwise,
    promise far more from a long draft than one per-token rate (21 of 24 kept: 0.875)."""
    from models.engine.speculation import FIRST_ACCEPTANCE, RunRecord

    record = RunRecord(64, FIRST_ACCEPTANCE[1])
    for _ in range(8):
        for _ in range(7):
            record.add(3, 3, 1.0)
        record.add(3, 0, 1.0)
    yields = record.yields(64)
    assert yields[0] == 1.0 and len(yields) == 65
    first = FIRST_ACCEPTANCE[1]
    assert yields[1] == pytest.approx(1 + (56 + 2 * first) / (64 + 2))  # the first position's
    assert record.rate() == pytest.approx((168 + 2 * first) / (176 + 2))
    assert yields[63] > 40 > geometric(record.rate(), 63)[63] + 10
    assert np.all(np.diff(yields) > 0)
    # Drafts of 63 then cut at their 40th token every time: the positions' own record wins.
    for _ in range(30):
        record.add(63, 39, 0.9)
    yields = record.yields(64)
    assert yields[39] > 35 and yields[63] - yields[40] < 3  # few go past the 40th


def test_drafts_are_planned_for_the_whole_step():
    from models.engine.speculation import StepCost, plan_drafts

    cost = StepCost()
    cost.extra = 0.1
    four = [(0, 1), (1, 1), (2, 1), (3, 1)]
    # A reply alone that copies drafts long; one that guesses poorly does not draft.
    assert plan_drafts([(0, 1)], {0: geometric(0.95, 8)}, cost, 512, False) == {0: 8}
    assert plan_drafts([(0, 1)], {0: geometric(0.1, 8)}, cost, 512, False) == {}
    # Beside three others, one reply's draft is a second pass over the weights: a weak
    # draft is left out there, though it would pay for a reply alone.
    assert plan_drafts([(0, 1)], {0: geometric(0.8, 3)}, cost, 512, False) == {0: 3}
    assert plan_drafts(four, {0: geometric(0.8, 3)}, cost, 512, True) == {}
    # Four replies that copy draft together, at one length: one pass.
    assert plan_drafts(four, {i: geometric(0.95, 8) for i in range(4)}, cost, 512, True) == \
        {i: 8 for i in range(4)}
    # With a single KV stream nothing splits: the weak draft pays again.
    assert plan_drafts(four, {0: geometric(0.8, 3)}, cost, 512, False) == {0: 3}


def test_drafts_follow_acceptance_and_are_watched_when_they_do_not_pay():
    from models.engine.speculation import StepCost, LookupDrafter

    cost = StepCost()
    cost.extra = 0.3
    drafter = LookupDrafter(max_length=8, max_ngram=2, capacity=100, cost=cost)
    copy = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
    assert drafter.propose(copy, [1, 2], room=50) == copy[2:10]  # hopeful at first
    assert drafter.propose(copy, [1, 2], room=3) == copy[2:5]  # never past the room
    assert drafter.propose(copy, [12, 1], room=50) == []  # a single token is no match
    for _ in range(8):
        drafter.update(4, 0)  # every guess wrong: not worth drafting
    assert drafter.rate(0) < 0.2
    # Nothing is offered now: the draft found is watched, and the next look waits.
    assert drafter.propose(copy, [1, 2], room=50) == []
    drafter.observe([3, 4])  # the reply picks what the draft guessed...
    assert drafter.propose(copy, [1, 2], room=50) == []  # (still watching: no look)
    drafter.observe([5, 99])  # ...then departs from it: 3 of 8 kept
    assert 0.2 < drafter.rate(0) < 0.5
    for _ in range(12):  # the reply copies whatever it watches
        drafter.propose(copy, [1, 2], room=50)
        drafter.observe(copy[2:10])
    assert drafter.rate(0) > 0.4
    assert drafter.propose(copy, [1, 2], room=50) == copy[2:10]  # offered again
    assert (drafter.drafted, drafter.accepted) == (8 * 4, 0)  # watching drafts nothing


def test_long_matches_are_trusted_apart_from_short_ones():
    from models.engine.prompt_lookup import find_match
    from models.engine.speculation import LONG_MATCH, LookupDrafter, StepCost

    passage = list(range(100, 160))
    history = np.array(passage + [7] + passage[:LONG_MATCH], dtype=np.intc)
    assert find_match(history, 8, 4, 64) == (LONG_MATCH, LONG_MATCH)
    assert find_match(history, 8, 4) == (LONG_MATCH, 8)  # not followed back: the tail's
    assert find_match(history[-30:], 8, 4, 64)[1] < LONG_MATCH
    assert find_match(np.array([1, 2, 3, 4], dtype=np.intc), 8, 2) == (-1, 0)
    # The same 8 tokens recur later after other text: the place matching further back
    # (the passage being copied) still wins over the more recent one.
    recurring = passage + [7] + passage[20:30] + [8] + passage[:LONG_MATCH]
    assert find_match(np.array(recurring, dtype=np.intc), 8, 4, 64) == (LONG_MATCH, LONG_MATCH)

    cost = StepCost()
    cost.extra = 0.6  # a CPU where a draft pays only when nearly all of it is kept
    drafter = LookupDrafter(max_length=16, max_ngram=8, capacity=200, cost=cost)
    for _ in range(6):  # drafts from a few common tokens mostly fail
        drafter.watch([1, 2, 3], kind=0)
        drafter.observe([9])
    for _ in range(6):  # drafts of a passage being copied are kept whole
        drafter.watch(list(range(16)), kind=1)
        drafter.observe(list(range(16)))
    assert drafter.rate(0) < 0.5 < 0.95 < drafter.rate(1)
    long_history = passage + [7] + passage[:LONG_MATCH]
    assert drafter.propose(long_history, [], room=50) == passage[LONG_MATCH:LONG_MATCH + 16]
    assert len(drafter.offered) == 17 and drafter.offered[16] > 16 * 0.95
    short = passage + [7] + [55, 56, 57, 58] + passage[20:25]  # a 5-token match only
    assert drafter.propose(short, [], room=50) == []  # watched, not offered


def test_a_reply_going_round_a_loop_drafts_past_its_own_end():
    from models.engine.speculation import LookupDrafter, StepCost, repeat_continuation

    assert repeat_continuation(np.array([5, 6, 7]), 8) == [5, 6, 7, 5, 6, 7, 5, 6]
    assert repeat_continuation(np.array([5, 6, 7, 8]), 2) == [5, 6]
    assert repeat_continuation(np.array([], dtype=np.intc), 4) == []
    cost = StepCost()
    cost.extra = 0.05
    drafter = LookupDrafter(max_length=20, max_ngram=8, capacity=200, cost=cost)
    cycle = [11, 12, 13, 14, 15, 16]
    loop = [1, 2] + cycle * 7  # six tokens again and again: the match is six back
    assert drafter.propose(loop, [], room=50) == (cycle * 4)[:20]


TILE_CHECK = r"""
import sys, numpy as np
from models.engine import runtime
from models.engine.llama_log import LlamaLogCapture
from models.engine.settings import LoadSettings
from tests.benchmarks.bench_step_sizes import Sequence
capture = LlamaLogCapture()  # kept: llama.cpp logs through it until the model is closed
model = runtime.LoadedModel(sys.argv[1], LoadSettings(threads=1, batch_threads=1,
    context_length=1024, flash_attention=True), capture)
seq = Sequence(model, [(7 * i + 3) % 5000 + 100 for i in range(600)])
seq.read(0, 400, logits=False)
one = []
for i in range(64):
    seq.read(400 + i, 1)
    one.append(seq.rows(1)[0])
for count in (63, 64):
    seq.forget(400)
    seq.read(400, count)
    print(count, float(np.abs(seq.rows(count) - np.stack(one[:count])).max()))
model.close()
"""


def test_a_reply_reads_fewer_tokens_in_a_step_than_flash_attention_tiles(smollm2_gguf):
    """Why :data:`MOST_STEP_TOKENS` is 63: read in one step, 63 tokens of a sequence give
    the logits of reading them one at a time (plain decoding) exactly, and 64 do not
    (llama.cpp's CPU flash attention switches to its tiled kernel). Fails when the pinned
    llama.cpp moves that line, so the limit is looked at again."""
    import subprocess
    import sys

    from models.engine.speculation import MOST_STEP_TOKENS

    result = subprocess.run([sys.executable, "-c", TILE_CHECK, str(smollm2_gguf)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    apart = dict(line.split() for line in result.stdout.strip().splitlines()[-2:])
    assert MOST_STEP_TOKENS == 63
    assert float(apart["63"]) == 0.0 and float(apart["64"]) > 0.01, apart


def test_greedy_reply_is_unchanged_and_drafts_are_accepted(smollm2_engine):
    plain = smollm2_engine.chat(EDIT, GREEDY).wait()
    assert plain.stats.draft_tokens == 0 and plain.stats.acceptance_rate == 0.0
    fast = smollm2_engine.chat(EDIT, LOOKUP).wait()
    assert fast.text == plain.text
    assert fast.stats.completion_tokens == plain.stats.completion_tokens
    assert fast.stop_reason == plain.stop_reason
    s = fast.stats
    assert s.draft_tokens > 0 and 0 < s.accepted_tokens <= s.draft_tokens
    assert s.acceptance_rate == pytest.approx(s.accepted_tokens / s.draft_tokens)
    assert s.decode_tokens_per_second > 0
    # Plain decoding runs the model once per token; lookup settles several per pass.
    assert 0.9 < plain.stats.tokens_per_pass <= 1.05
    assert s.tokens_per_pass > 1.1 and s.decode_passes < plain.stats.decode_passes
    # The cache holds what plain decoding leaves: every reply token but a cut-off last one.
    kv = smollm2_engine.stats()["kv_cache_tokens"]
    assert kv == s.prompt_tokens + s.completion_tokens - (1 if s.stop_reason == "length" else 0)


def test_follow_up_reuses_the_cache_and_the_saved_session(smollm2_engine):
    first = smollm2_engine.chat(EDIT, LOOKUP, conversation_id="lookup").wait()
    history = EDIT + [{"role": "assistant", "content": first.text}, FOLLOW_UP]
    # From scratch, plain: the reference for the follow-up.
    smollm2_engine.chat(EVICT, ChatOptions(temperature=0.0, max_tokens=4)).wait()
    reference = smollm2_engine.chat(history, GREEDY).wait()
    assert reference.stats.prompt_tokens_reused < first.stats.prompt_tokens / 2

    # The saved state of the speculative turn is restored and reused.
    smollm2_engine.chat(EVICT, ChatOptions(temperature=0.0, max_tokens=4)).wait()
    restored = smollm2_engine.chat(history, LOOKUP, conversation_id="lookup").wait()
    assert restored.stats.session_restored
    assert restored.text == reference.text
    assert restored.stats.prompt_tokens_reused >= \
        first.stats.prompt_tokens + first.stats.completion_tokens - 1

    # The live cache after a speculative turn is reused too.
    again = history + [{"role": "assistant", "content": restored.text}, FOLLOW_UP]
    live = smollm2_engine.chat(again, LOOKUP).wait()
    s = live.stats
    assert s.prompt_tokens_reused >= \
        restored.stats.prompt_tokens + restored.stats.completion_tokens - 1
    smollm2_engine.chat(EVICT, ChatOptions(temperature=0.0, max_tokens=4)).wait()
    assert live.text == smollm2_engine.chat(again, GREEDY).wait().text
    smollm2_engine.delete_session("lookup")


def test_sampled_reply_with_a_seed_is_unchanged(smollm2_engine):
    """The sampler picks from the same rows in the same order with the same random draws,
    so a seeded sampled reply is the plain one, token for token."""
    sampled = dict(temperature=0.7, seed=5, max_tokens=64)
    plain = smollm2_engine.chat(EDIT, ChatOptions(**sampled, speculative="off")).wait()
    fast = smollm2_engine.chat(EDIT, ChatOptions(**sampled)).wait()
    assert fast.text == plain.text and fast.stats.draft_tokens > 0


def test_schema_reply_drafts_under_the_grammar_and_is_unchanged(smollm2_engine):
    """A JSON reply that repeats the prompt's text drafts it; drafts end where the grammar
    refuses a token, and the reply is still the plain one, valid."""
    from models.structured.validate import validation_errors

    schema = {"type": "object", "properties": {"fixed": {"type": "string"}},
              "required": ["fixed"], "additionalProperties": False}
    ask = [{"role": "user", "content": "Fix the typos in this paragraph and return it as JSON "
            "with the key fixed:\n\n" + PARAGRAPH}]
    options = dict(temperature=0.0, max_tokens=80, response_format="json_schema", schema=schema)
    plain = smollm2_engine.chat(ask, ChatOptions(**options, speculative="off")).wait()
    fast = smollm2_engine.chat(ask, ChatOptions(**options)).wait()
    assert fast.text == plain.text
    assert fast.stats.valid is plain.stats.valid is True
    assert validation_errors(json.loads(fast.text), schema) == []
    assert fast.stats.accepted_tokens > 0 and fast.stats.decode_passes < plain.stats.decode_passes


def test_replies_drafting_side_by_side_in_the_batch_are_unchanged(smollm2_gguf):
    """Four replies at once, each drafting (or not) in the same decodes as the others', are
    the four replies plain decoding gives together, token for token; afterwards each slot's
    cache holds exactly its tokens.

    The engine's scheduler runs in this process so that both runs admit the four requests
    in the same step and read their prompts in the same batches: llama.cpp rounds a batch
    of several prompts differently from one (``test_engine_batching``), which would make
    the replies depend on arrival timing rather than on speculation."""
    import multiprocessing

    import llama_cpp

    from models.engine.batching import BatchScheduler
    from models.engine.cancel_flag import CancelFlag
    from models.engine.llama_log import LlamaLogCapture
    from models.engine.runtime import LoadedModel

    requests = [EDIT, [{"role": "user", "content": "Return this line unchanged: " + PARAGRAPH}],
                [{"role": "user", "content": "Write a short poem about the sea."}],
                [{"role": "user", "content": "Fix the typos: Teh rivr is wide and teh fox is "
                  "quik. Teh rivr is wide and teh fox is quik."}]]
    settings = LoadSettings(**{**FAST_SETTINGS, "parallel": 4}, flash_attention=True)
    log_capture = LlamaLogCapture()
    model = LoadedModel(str(smollm2_gguf), settings, log_capture)
    sent: list[dict] = []
    scheduler = BatchScheduler(model, CancelFlag(multiprocessing.get_context("spawn")).shared,
                               sent.append, cache_ram_bytes=0)

    def run(options: ChatOptions) -> tuple[list[str], list[dict]]:
        llama_cpp.llama_memory_seq_rm(scheduler.memory, -1, -1, -1)  # every slot empty
        for slot in scheduler.slots:
            slot.tokens = []
        first = len(sent)
        for k, messages in enumerate(requests):
            scheduler.submit({"id": k, "lane": k, "messages": messages,
                              "options": options.to_dict()})
        while scheduler.busy():
            scheduler.step()
        texts, stats = [""] * len(requests), [{}] * len(requests)
        for message in sent[first:]:
            for event in message.get("events", [message]):
                texts[event["id"]] += event.get("text", "")
                if event["event"] == "done":
                    stats[event["id"]] = event["stats"]
        return texts, stats

    try:
        plain, _ = run(GREEDY)
        fast, stats = run(LOOKUP)
        assert fast == plain
        assert sum(s["accepted_tokens"] for s in stats) > 0
        for slot in scheduler.slots:  # no rejected draft left behind in any cache
            last = llama_cpp.llama_memory_seq_pos_max(scheduler.memory, slot.seq_id)
            assert last + 1 == len(slot.tokens) > 0
    finally:
        scheduler.close()
        model.close()
        log_capture.close()


@pytest.mark.parametrize("options, words", [
    (ChatOptions(speculative="medusa"), "speculative decoding mode"),
    (ChatOptions(speculative="draft_model"), "needs a draft model"),
    (ChatOptions(speculative="prompt_lookup", draft_tokens=0), "draft tokens"),
    (ChatOptions(speculative="prompt_lookup", draft_tokens=65), "draft tokens"),
    (ChatOptions(speculative="prompt_lookup", ngram_size=9), "n-gram size"),
    (ChatOptions(speculative="prompt_lookup", ngram_size=True), "n-gram size"),
])
def test_invalid_speculative_options_are_refused_with_a_sentence(smollm2_engine, options, words):
    with pytest.raises(QuantDeskError) as info:
        smollm2_engine.chat(EDIT, options)
    assert words in info.value.what and info.value.fix
