"""The assistant's tools (time, date, calculator, units, timers, capitals) and number words for speech."""

from dlm.tools.numbers import int_to_words, number_to_words, ordinal_words
from dlm.tools.registry import TOOLS, Tool, ToolError, ToolSession, run_tool, tool_call_schema, tool_specs

__all__ = [
    "TOOLS", "Tool", "ToolError", "ToolSession", "int_to_words", "number_to_words", "ordinal_words", "run_tool",
    "tool_call_schema", "tool_specs",
]
