"""Arithmetic by walking a parsed expression tree: only whitelisted nodes run, never `eval`.

A voice user can say anything, and the text reaches this function through a model; so operators are
whitelisted, exponents and magnitudes are bounded, and every failure is a `ValueError` with a reason.
"""

from __future__ import annotations

import ast
import math
import operator

from dlm.tools.numbers import join_digit_groups, sayable

MAX_EXPRESSION_CHARS = 200
MAX_EXPONENT = 64

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCTIONS = {"sqrt": math.sqrt, "abs": abs, "round": round}


def evaluate(expression: str) -> int | float:
    """Value of an arithmetic expression such as '12 * 4' or 'sqrt(2) ^ 2' ('^' means power)."""
    if not isinstance(expression, str) or not expression.strip():
        raise ValueError("expression must be a non-empty string")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ValueError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    return _check(_eval(_parse(expression).body))


def readable(expression: str) -> bool:
    """Whether `expression` parses at all; whether it evaluates ("10 / 0") is the tool's to say."""
    try:
        _parse(expression)
    except ValueError:
        return False
    return True


def _parse(expression: str) -> ast.Expression:
    """The syntax tree ('^' is power, '×' and '÷' the signs, "2,500" one number); a ValueError when there is
    none."""
    text = join_digit_groups(expression).replace("^", "**").replace("×", "*").replace("÷", "/")
    try:
        return ast.parse(text, mode="eval")
    except SyntaxError as err:
        raise ValueError(f"cannot parse expression {expression!r}") from err


def _check(value: int | float) -> int | float:
    """Every step's value, as the reply could say it: a result it could not is refused here, with a reason."""
    return sayable(value, "result")


def _eval(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return _check(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ValueError(f"exponent larger than {MAX_EXPONENT}")
        if isinstance(node.op, ast.Pow) and left < 0 and right != int(right):
            raise ValueError("fractional power of a negative number")
        try:
            return _check(_BINARY[type(node.op)](left, right))
        except ZeroDivisionError as err:
            raise ValueError("division by zero") from err
        except OverflowError as err:
            raise ValueError("result is too large") from err
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCTIONS
        and len(node.args) == 1
        and not node.keywords
    ):
        arg = _eval(node.args[0])
        if node.func.id == "sqrt" and arg < 0:
            raise ValueError("square root of a negative number")
        return _check(_FUNCTIONS[node.func.id](arg))
    raise ValueError(f"unsupported element in expression: {ast.dump(node)[:60]}")
