"""llguidance, the constraint engine: grammars in, token masks and forced tokens out.

Every kind of constraint ends as one llguidance grammar (a string that crosses the pipe to
the engine's child process as is): a JSON Schema through its JSON compiler, any JSON
through the empty schema, a user's GBNF grammar through its GBNF → Lark converter, and a
grammar that already starts with ``%llguidance`` (the tool-call grammars, llama.cpp's own
convention for Lark text in its ``grammar`` field) as Lark. Replies are compact JSON: no
whitespace between tokens, so keys and punctuation are forced and fast-forwarded.

llguidance's tokenizer is built from the GGUF's vocabulary (each token's bytes as llama.cpp
writes them, control tokens marked) once per loaded model and kept: building it walks the
whole vocabulary (about 2 s for 49k tokens).
"""

from __future__ import annotations

import functools
import json
import threading
import weakref
from typing import Any, Optional

from models.foundation.errors import QuantDeskError

LARK_HEADER = "%llguidance"
# What every JSON grammar is compiled with: compact JSON, ',' and ':' without spaces.
JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ",", "key_separator": ":"}
GRAMMAR_FIX = ("Check the grammar's syntax (GBNF: rules 'name ::= ...' with a 'root' rule); "
               "https://github.com/ggml-org/llama.cpp/blob/master/grammars/README.md "
               "describes it.")


def llguidance() -> Any:
    """The llguidance package with the modules used here, imported on first use. The import
    statements are plain so that the installers' freezing finds the package.

    Raises:
        QuantDeskError: its native library cannot be loaded (a damaged install, or a system
            without what the library needs, such as Windows before 10).
    """
    try:
        import llguidance
        import llguidance.gbnf_to_lark
        import llguidance.llamacpp
    except ImportError as exc:
        raise QuantDeskError(f"The structured-output engine (llguidance) could not be loaded: {exc}.",
                             "Reinstall QuantDesk; on Windows it needs Windows 10 or later.") from None
    return llguidance


def json_schema_grammar(schema: Any) -> str:
    """The llguidance grammar of JSON values matching ``schema`` (compact JSON)."""
    LLMatcher = llguidance().LLMatcher

    return LLMatcher.grammar_from_json_schema(schema, overrides=JSON_OPTIONS)


def lark_json(schema: Any) -> str:
    """``%json {...}``: a JSON Schema embedded in a Lark grammar, compiled compact."""
    if isinstance(schema, bool):
        schema = {} if schema else {"not": {}}
    return "%json " + json.dumps({**schema, "x-guidance": JSON_OPTIONS}, ensure_ascii=False)


def lark_grammar(lark: str) -> str:
    """The llguidance grammar of a Lark text."""
    LLMatcher = llguidance().LLMatcher

    return LLMatcher.grammar_from_lark(lark)


def grammar_error(grammar: str) -> Optional[str]:
    """llguidance's reason for refusing ``grammar``, or ``None`` when it compiles."""
    LLMatcher = llguidance().LLMatcher

    return LLMatcher.validate_grammar(grammar) or None


def gbnf_grammar(text: str) -> str:
    """The llguidance grammar of a GBNF grammar (llama.cpp's syntax, rule ``root``) or of a
    Lark text that starts with ``%llguidance``.

    Raises:
        QuantDeskError: the grammar does not parse or does not compile (a sentence with
            llguidance's own words: the line and what it expected).
    """
    gbnf_to_lark = llguidance().gbnf_to_lark.gbnf_to_lark

    if text.lstrip().startswith(LARK_HEADER):
        lark = text
    else:
        try:
            lark = gbnf_to_lark(text)
        except Exception as exc:  # GbnfToLarkError, and plain Exception for unknown rules
            raise QuantDeskError(f"The grammar has an error: {exc}.", GRAMMAR_FIX) from None
    grammar = lark_grammar(lark)
    problem = grammar_error(grammar)
    if problem:
        raise QuantDeskError(f"The grammar has an error: {problem.strip()}.", GRAMMAR_FIX)
    return grammar


# -- the tokenizer of a loaded model ------------------------------------------------------

_tokenizers: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()
_tokenizers_lock = threading.Lock()


def tokenizer_for(llm) -> Any:
    """llguidance's tokenizer for a loaded ``llama_cpp.Llama``, built once per model (kept
    as long as the model object lives).

    Every end-of-generation token of the vocabulary (``<|im_end|>``, ``<|eot_id|>``…)
    counts as the end of the reply, as llama.cpp's ``llama_vocab_is_eog`` says.
    """
    import llama_cpp
    lltokenizer_from_vocab = llguidance().llamacpp.lltokenizer_from_vocab

    with _tokenizers_lock:
        tokenizer = _tokenizers.get(llm)
        if tokenizer is None:
            vocab = llama_cpp.llama_model_get_vocab(llm.model)
            n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
            ends = [t for t in range(n_vocab) if llama_cpp.llama_vocab_is_eog(vocab, t)]
            tokenizer = _tokenizers[llm] = lltokenizer_from_vocab(vocab, eos_token=ends or None)
        return tokenizer


def matcher_for(llm, grammar: str) -> Any:
    """A fresh ``llguidance.LLMatcher`` for one reply.

    Raises:
        RuntimeError: llguidance refused a grammar that was checked before (a bug).
    """
    LLMatcher = llguidance().LLMatcher

    matcher = LLMatcher(tokenizer_for(llm), grammar, log_level=0)
    if matcher.is_error():
        raise RuntimeError(f"llguidance refused a checked grammar: {matcher.get_error()}")
    return matcher


class _ByteTokens:
    """A vocabulary of the 256 bytes plus an end token: grammars judged on text alone."""

    eos_token_id = 256
    bos_token_id = None
    tokens = [bytes([b]) for b in range(256)] + [b"\xff<end>"]
    special_token_ids = [256]

    def __call__(self, text: bytes) -> list[int]:
        return list(text)


@functools.lru_cache(maxsize=1)
def _byte_tokenizer() -> Any:
    LLTokenizer, TokenizerWrapper = llguidance().LLTokenizer, llguidance().TokenizerWrapper

    return LLTokenizer(TokenizerWrapper(_ByteTokens()))


def grammar_accepts(grammar: str, text: str) -> bool:
    """Whether ``text`` is a complete sentence of ``grammar`` (no model needed: the grammar
    is run over the text's bytes)."""
    LLMatcher = llguidance().LLMatcher

    matcher = LLMatcher(_byte_tokenizer(), grammar, log_level=0)
    return matcher.consume_tokens(list(text.encode("utf-8"))) and matcher.is_accepting()
