"""Constrained decoding: JSON-schema prefix automaton and the token-level allowed-set layer."""

from dlm.constrained.completion import admits_a_value
from dlm.constrained.json_prefix import JsonPrefixAutomaton
from dlm.constrained.schema import CompiledSchema, SchemaError, check, check_schema
from dlm.constrained.token_constraint import (
    JsonSchemaConstraint,
    TokenGrammar,
    vocab_strings,
    writable_characters,
)

__all__ = [
    "CompiledSchema", "JsonPrefixAutomaton", "JsonSchemaConstraint", "SchemaError", "TokenGrammar", "admits_a_value",
    "check", "check_schema", "vocab_strings", "writable_characters",
]
