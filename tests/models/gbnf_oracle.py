"""llama.cpp's verdict on GBNF grammars and texts, in a process of its own.

``python -m tests.models.gbnf_oracle MODEL < cases.json`` reads ``[{"grammar": ...,
"texts": [...]}, ...]`` and prints one JSON list: per case ``null`` when llama.cpp
refuses the grammar (``llama_sampler_init_grammar`` returns NULL), else one boolean per
text: whether llama.cpp's grammar sampler lets exactly that text through and then allows
end of generation.

How a text is judged: it is tokenized with the model's vocabulary (only the vocabulary
is loaded), each token is offered alone to ``llama_sampler_apply`` (a rejected token
gets logit -inf) and accepted with ``llama_sampler_accept`` only when allowed, so
llama.cpp never aborts on a rejected token; at the end the end-of-generation token is
offered the same way (llama.cpp allows it only when the grammar is complete).
"""

from __future__ import annotations

import ctypes
import json
import math
import sys


def main() -> int:
    import numpy as np

    import llama_cpp as lib

    llm = lib.Llama(model_path=sys.argv[1], vocab_only=True, verbose=False)
    vocab = lib.llama_model_get_vocab(llm.model)
    eog = lib.llama_vocab_eos(vocab)
    dtype = np.dtype([("id", np.intc), ("logit", np.single), ("p", np.single)], align=True)
    one = np.zeros(1, dtype=dtype)

    def allowed(sampler, token: int) -> bool:
        one[0] = (token, 0.0, 0.0)
        array = lib.llama_token_data_array(data=one.ctypes.data_as(lib.llama_token_data_p), size=1,
                                           selected=-1, sorted=False)
        lib.llama_sampler_apply(sampler, ctypes.byref(array))
        return not math.isinf(float(one[0]["logit"]))

    out = []
    for case in json.loads(sys.stdin.read()):
        sampler = lib.llama_sampler_init_grammar(vocab, case["grammar"].encode("utf-8"), b"root")
        if not sampler:
            out.append(None)
            continue
        verdicts = []
        for text in case["texts"]:
            lib.llama_sampler_reset(sampler)
            tokens = llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
            assert llm.detokenize(tokens) == text.encode("utf-8"), text
            ok = True
            for token in tokens:
                if not allowed(sampler, token):
                    ok = False
                    break
                lib.llama_sampler_accept(sampler, token)
            verdicts.append(ok and allowed(sampler, eog))
        lib.llama_sampler_free(sampler)
        out.append(verdicts)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
