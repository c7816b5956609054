"""Structured output: JSON Schema or GBNF grammars constraining llama.cpp generation.

Qt-free and engine-agnostic: the engine's child process calls these with its own
``llama_cpp.Llama``. See README.md beside this file for the measurements behind the
design (our converter and matcher over llguidance/xgrammar, check-first sampling,
fast-forward with the last forced token held back).

Typical use inside the engine::

    constraint = constraint_for_schema(schema)          # QuantDeskError lists unsupported features
    generator = ConstrainedGenerator(llm, constraint.gbnf, chat_options)
    text = generator.generate(prompt_tokens, max_tokens=256)
    value = constraint.check(text)                      # QuantDeskError if invalid
"""

from models.structured.constraint import (OutputConstraint, constraint_for_any_json,
                                          constraint_for_gbnf, constraint_for_schema)
from models.structured.fast_forward import ConstrainedGenerator, GenerationStats
from models.structured.gbnf import GbnfSyntaxError, GrammarMatcher, parse_gbnf
from models.structured.schema_grammar import (SchemaGrammar, UnsupportedFeature, any_json_grammar,
                                              schema_to_grammar)
from models.structured.schema_check import SchemaError, check_schema
from models.structured.validate import json_equal, validate, validation_errors

__all__ = ["OutputConstraint", "constraint_for_any_json", "constraint_for_gbnf",
           "constraint_for_schema", "ConstrainedGenerator", "GenerationStats",
           "GbnfSyntaxError", "GrammarMatcher", "parse_gbnf", "SchemaGrammar", "UnsupportedFeature",
           "any_json_grammar", "schema_to_grammar", "validate", "validation_errors", "SchemaError",
           "check_schema", "json_equal"]
