"""Benchmark: time to first token when a long conversation is reopened, restore vs prefill.

A conversation of about 2,000 tokens (``--tokens``) is answered once by an engine with a
``conversation_id``, which saves its KV state. Then, for each run, two fresh engine
processes (a "reopened" conversation) answer the next user turn:

- **restore**: with the ``conversation_id``, so the engine loads the saved state and
  evaluates only the new turn;
- **re-prefill**: without it, so the whole history is evaluated again.

Both replies are greedy, and must be identical (printed). The figures are time to first
token as measured inside the engine and as the client sees it, medians over the runs,
with the ratio restore / re-prefill (target ≤ 0.10). Also printed: the session file's
size and the time to save it.

Run: ``.venv/bin/python tests/benchmarks/bench_sessions.py [MODEL.gguf] [--runs N]
[--tokens N] [--threads N]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

SUBJECTS = ["rivers", "mountains", "bridges", "libraries", "harbours", "forests", "deserts",
            "observatories", "railways", "gardens", "glaciers", "lighthouses"]


def conversation(approx_tokens: int) -> list[dict]:
    """Alternating turns about varied subjects, about ``approx_tokens`` tokens long."""
    messages: list[dict] = [{"role": "system", "content": "You are a patient travel guide."}]
    turn = 0
    # SmolLM2's tokenizer makes about 1.6 tokens of a word of this text (with the template).
    while len(" ".join(m["content"] for m in messages).split()) * 1.6 < approx_tokens:
        subject = SUBJECTS[turn % len(SUBJECTS)]
        messages.append({"role": "user", "content": f"Question {turn + 1}: tell me about the "
                                                    f"{subject} of region {turn * 7 + 3}."})
        messages.append({"role": "assistant", "content": " ".join(
            f"The {subject} of region {turn * 7 + 3} are known for feature {k}, which "
            f"visitors from town {turn * 11 + k} describe in detail." for k in range(5))})
        turn += 1
    return messages


def timed_reply(client, messages: list[dict], conversation_id) -> tuple[object, float]:
    """The reply and its client-side time to first token."""
    from models.engine import ChatOptions

    reply = client.chat(messages, ChatOptions(temperature=0.0, max_tokens=16),
                        conversation_id=conversation_id).wait()
    return reply, reply.first_delta_at - reply.started


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("model", nargs="?", type=Path)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if args.model is None:
        from tests.conftest import cached_models_dir, fetch_smollm2

        args.model = fetch_smollm2(cached_models_dir())
    # Sessions go to a scratch folder, never the user's.
    os.environ["QUANTDESK_HOME"] = tempfile.mkdtemp(prefix="bench-sessions-")

    from models.engine import EngineClient, LoadSettings
    from models.engine.sessions import SessionStore

    settings = LoadSettings(threads=args.threads, batch_threads=args.threads,
                            context_length=4096)
    history = conversation(args.tokens)
    store = SessionStore.default()
    with EngineClient() as client:
        client.load(args.model, settings)
        first, _ = timed_reply(client, history, "bench")
        started = time.perf_counter()
        client.stats()  # returns once the save that follows the reply is done
        save_seconds = time.perf_counter() - started
    saved = store.path_for("bench").read_bytes()
    size = len(saved)
    print(f"conversation: {first.stats.prompt_tokens} prompt tokens + "
          f"{first.stats.completion_tokens} reply tokens; session file {size / 2**20:.1f} MiB, "
          f"saved within {save_seconds * 1000:.0f} ms after the reply ended", flush=True)
    reopened = history + [{"role": "assistant", "content": first.text},
                          {"role": "user", "content": "Which of these should I visit first?"}]
    results: dict[str, list[float]] = {k: [] for k in ("r_in", "r_cl", "p_in", "p_cl")}
    for run in range(args.runs):
        # The restoring engine saves the grown conversation after its reply: put the
        # state of the first answer back, so every run restores the same thing.
        store.path_for("bench").write_bytes(saved)
        with EngineClient() as client:
            client.load(args.model, settings)
            restored, r_client = timed_reply(client, reopened, "bench")
        with EngineClient() as client:
            client.load(args.model, settings)
            prefilled, p_client = timed_reply(client, reopened, None)
        assert restored.stats.session_restored, restored.stats.session_notice
        same = restored.text == prefilled.text
        results["r_in"].append(restored.stats.time_to_first_token)
        results["r_cl"].append(r_client)
        results["p_in"].append(prefilled.stats.time_to_first_token)
        results["p_cl"].append(p_client)
        print(f"run {run + 1}: restore reused {restored.stats.prompt_tokens_reused} and "
              f"evaluated {restored.stats.prompt_tokens_evaluated} of "
              f"{restored.stats.prompt_tokens} tokens, TTFT {results['r_in'][-1]:.3f} s; "
              f"re-prefill evaluated {prefilled.stats.prompt_tokens_evaluated}, TTFT "
              f"{results['p_in'][-1]:.3f} s; same reply: {same}", flush=True)
        if not same:
            print(f"  restore:    {restored.text!r}\n  re-prefill: {prefilled.text!r}")
    med = {k: statistics.median(v) for k, v in results.items()}
    print(f"\nTime to first token after reopening ({args.threads} threads, context 4096, "
          f"median of {args.runs}):")
    print(f"{'':26}{'inside engine':>15}{'client side':>15}")
    print(f"{'restore saved session':26}{med['r_in']:14.3f}s{med['r_cl']:14.3f}s")
    print(f"{'re-prefill':26}{med['p_in']:14.3f}s{med['p_cl']:14.3f}s")
    print(f"restore / re-prefill: {med['r_in'] / med['p_in']:.3f} (inside), "
          f"{med['r_cl'] / med['p_cl']:.3f} (client side); target <= 0.10")
    return 0


if __name__ == "__main__":
    sys.exit(main())
