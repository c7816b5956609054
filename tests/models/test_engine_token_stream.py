"""From tokens to deltas: stop strings split across tokens, characters split across tokens.

The UTF-8 test uses SmolLM2's real vocabulary (byte-level BPE: an emoji is several
tokens) through llama.cpp; the oracle is llama.cpp's own whole-sequence detokenizer.
"""

from __future__ import annotations

import pytest

from models.engine.token_stream import StopFilter


def run_filter(stops, pieces):
    stop = StopFilter(stops)
    out = [stop.push(p) for p in pieces]
    return out, stop.flush(), stop.stopped


def test_stop_string_split_across_pieces_is_cut_and_never_shown():
    out, tail, stopped = run_filter(["<|im_end|>"], ["Hello", " world", "<|im", "_end", "|>more"])
    assert "".join(out) + tail == "Hello world"
    assert stopped
    assert all("<|" not in piece for piece in out)


def test_a_false_start_is_released_when_it_cannot_become_a_stop():
    out, tail, stopped = run_filter(["STOP"], ["a ST", "ART b", " c"])
    assert "".join(out) + tail == "a START b c" and not stopped
    assert out[0] == "a "  # "ST" was held back until "ART" ruled the stop out


def test_the_earliest_of_several_stops_wins_and_text_before_it_is_kept():
    out, tail, stopped = run_filter(["\n\n", "User:"], ["one User: two\n\nthree"])
    assert "".join(out) + tail == "one " and stopped


def test_held_text_is_released_at_the_end_of_the_reply():
    out, tail, stopped = run_filter(["</answer>"], ["42 </ans"])
    assert out == ["42 "] and tail == "</ans" and not stopped


def test_no_stops_pass_text_through_unchanged():
    assert run_filter([], ["a", "b"]) == (["a", "b"], "", False)


@pytest.mark.smollm2
def test_characters_split_across_tokens_are_never_split_in_deltas(smollm2_gguf):
    import llama_cpp

    from models.engine.token_stream import TokenTextDecoder

    llm = llama_cpp.Llama(model_path=str(smollm2_gguf), vocab_only=True, verbose=False)
    text = "Rocket 🚀, naïve café, 中文字符 and ∑ done"
    tokens = llm.tokenize(text.encode(), add_bos=False, special=False)
    assert len(tokens) > len(text.split())  # multi-token characters are really there
    decoder = TokenTextDecoder(llama_cpp.llama_model_get_vocab(llm.model))
    deltas = [decoder.feed(t) for t in tokens] + [decoder.flush()]
    assert "".join(deltas) == llm.detokenize(tokens).decode() == text
    assert all("\ufffd" not in d for d in deltas)
    shared: dict[int, bytes] = {}  # a cache shared by replies gives the same text
    cached = [TokenTextDecoder(llama_cpp.llama_model_get_vocab(llm.model), shared)
              for _ in range(2)]
    for decoder in cached:
        assert "".join([decoder.feed(t) for t in tokens] + [decoder.flush()]) == text


def test_greedy_picks_what_llama_cpps_greedy_sampler_picks(smollm2_gguf):
    """Plain greedy takes the logits' argmax in numpy, through a view of each row kept per
    address; llama.cpp's own greedy sampler over the same logits is the oracle, at every
    position of a real prompt, and again after other text has been evaluated into the same
    rows (a kept view must read the new logits)."""
    import llama_cpp

    from models.engine.options import ChatOptions
    from models.engine.token_stream import Sampler

    llm = llama_cpp.Llama(model_path=str(smollm2_gguf), n_ctx=256, n_threads=2,
                          logits_all=True, verbose=False)
    oracle = llama_cpp.llama_sampler_init_greedy()
    rounds = []
    with Sampler(ChatOptions(temperature=0.0), llm.n_vocab()) as greedy, \
            Sampler(ChatOptions(temperature=0.0, repeat_penalty=1.1), llm.n_vocab()) as chain:
        assert greedy._greedy is not None and chain._greedy is None  # both paths
        for text in (b"The capital of France is Paris. The capital of Italy is",
                     b"One, two, three, four, five, six, seven, eight, nine and"):
            tokens = llm.tokenize(text)
            llm.reset()
            llm.eval(tokens)
            picks = [greedy.sample(llm.ctx, i) for i in range(len(tokens))]
            expected = [llama_cpp.llama_sampler_sample(oracle, llm.ctx, i)
                        for i in range(len(tokens))]
            rounds.append((picks, expected))
        assert chain.sample(llm.ctx, len(tokens) - 1) in range(llm.n_vocab())
    llama_cpp.llama_sampler_free(oracle)
    for picks, expected in rounds:
        assert picks == expected and len(set(picks)) > 3
    assert rounds[0][0][:5] != rounds[1][0][:5]
