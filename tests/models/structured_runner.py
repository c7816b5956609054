"""Run the structured-output schema set on a GGUF model, in a process of its own.

A native fault in llama.cpp or the grammar engine must fail a test, not kill the run, so the
tests and the benchmark run generation here, as ``python -m tests.models.structured_runner
MODEL --modes ...``, and read one JSON line per case and mode from stdout.

Modes:
    plain      grammar-constrained, every token sampled
    ff         constrained with guided fast-forward (last forced token held back)
    ff-all     constrained with fast-forward of every forced token
    free       unconstrained (benchmark reference)
"""

from __future__ import annotations

import argparse
import json
import sys

MODES = {
    "plain": dict(constrained=True, fast_forward=False, hold_back_last=True, check_first=True),
    "ff": dict(constrained=True, fast_forward=True, hold_back_last=True, check_first=True),
    "ff-all": dict(constrained=True, fast_forward=True, hold_back_last=False, check_first=True),
    "mask-all": dict(constrained=True, fast_forward=False, hold_back_last=True, check_first=False),
    "free": dict(constrained=False, fast_forward=False, hold_back_last=True, check_first=True),
}


def chatml_prompt(llm, schema, task: str) -> list[int]:
    """SmolLM2's ChatML prompt asking for JSON that fits ``schema``."""
    system = "You reply with JSON only."
    if schema:
        system += " The JSON must match this schema: " + json.dumps(schema, separators=(",", ":"))
    text = (f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{task}<|im_end|>\n"
            "<|im_start|>assistant\n")
    return llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--modes", default="plain,ff")
    parser.add_argument("--cases", default="", help="comma-separated case names; empty: all")
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)

    import llama_cpp

    from models.engine.options import ChatOptions
    from models.structured import ConstrainedGenerator, constraint_for_schema
    from tests.models.structured_schemas import SUPPORTED

    llm = llama_cpp.Llama(model_path=args.model, n_ctx=2048, n_threads=args.threads,
                          n_threads_batch=args.threads, verbose=False)
    names = [n for n in args.cases.split(",") if n] or list(SUPPORTED)
    for name in names:
        task, schema = SUPPORTED[name]
        constraint = constraint_for_schema(schema)
        prompt = chatml_prompt(llm, schema, task)
        for mode in args.modes.split(","):
            options = MODES[mode]
            generator = ConstrainedGenerator(
                llm, constraint.grammar if options["constrained"] else None, ChatOptions(temperature=0.0),
                fast_forward=options["fast_forward"], hold_back_last=options["hold_back_last"],
                check_first=options["check_first"])
            llm.reset()  # every mode decodes the whole prompt the same way
            text = generator.generate(prompt, args.max_tokens)
            s = generator.stats
            print(json.dumps({"case": name, "mode": mode, "text": text, "sampled": s.sampled_tokens,
                              "forced": s.forced_tokens, "stop": s.stop_reason, "seconds": s.seconds,
                              "full_masks": s.full_masks, "closed": s.closed_at_budget}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
