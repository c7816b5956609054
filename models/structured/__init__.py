"""Structured output: JSON Schema or GBNF grammars constraining llama.cpp generation.

Qt-free and engine-agnostic: the engine's child process calls these with its own
``llama_cpp.Llama``. llguidance is the constraint engine (grammars, token masks, forced
tokens); around it QuantDesk adds the schema policy (every keyword the grammar does not
enforce named with its JSON pointer before any token), check-first sampling, fast-forward
and the validation of every finished reply. See README.md beside this file.

Typical use inside the engine::

    constraint = constraint_for_schema(schema)          # QuantDeskError lists what is not enforced
    generator = ConstrainedGenerator(llm, constraint.grammar, chat_options)
    text = generator.generate(prompt_tokens, max_tokens=256)
    value = constraint.check(text)                      # QuantDeskError if invalid
"""

from models.structured.constraint import (OutputConstraint, constraint_for_any_json,
                                          constraint_for_gbnf, constraint_for_schema, schema_plan)
from models.structured.fast_forward import ConstrainedGenerator, GenerationStats
from models.structured.schema_check import SchemaError, check_schema
from models.structured.schema_policy import SchemaPlan, SchemaProblem, plan_schema
from models.structured.validate import json_equal, validate, validation_errors

__all__ = ["OutputConstraint", "constraint_for_any_json", "constraint_for_gbnf",
           "constraint_for_schema", "schema_plan", "ConstrainedGenerator", "GenerationStats",
           "SchemaPlan", "SchemaProblem", "plan_schema", "validate", "validation_errors",
           "SchemaError", "check_schema", "json_equal"]
