"""Numbers as a speaker says them ("forty-eight", "three point five"), so replies can go straight to TTS."""

from __future__ import annotations

import math
import re
from decimal import Decimal

_ONES = [
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen",
]
_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_SCALES = [(10**12, "trillion"), (10**9, "billion"), (10**6, "million"), (1000, "thousand")]
_ORDINAL_IRREGULAR = {
    "one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth",
    "nine": "ninth", "twelve": "twelfth",
}
MAX_SPOKEN = 10**15
# A value too small for its fixed decimals keeps this many significant figures, so 0.001 is not "zero"; but
# no more than MAX_DECIMALS places, below which a float is arithmetic noise ("0.1 + 0.2 - 0.3") or unsayable.
SIGNIFICANT = 3
MAX_DECIMALS = 9
# a comma between digit groups ("1,500", "12,000,000"), never one between numbers ("1, 2, 3" or "1,2")
_DIGIT_GROUP_COMMA = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


def _below_thousand(n: int) -> str:
    words = []
    if n >= 100:
        words.append(f"{_ONES[n // 100]} hundred")
        n %= 100
    if n >= 20:
        words.append(_TENS[n // 10] + (f"-{_ONES[n % 10]}" if n % 10 else ""))
    elif n or not words:
        words.append(_ONES[n])
    return " ".join(words)


def int_to_words(n: int) -> str:
    """English words for an integer, e.g. 1205 -> 'one thousand two hundred five'."""
    if abs(n) >= MAX_SPOKEN:
        raise ValueError(f"number too large to speak: {n}")
    if n < 0:
        return "minus " + int_to_words(-n)
    if n < 1000:
        return _below_thousand(n)
    words = []
    for value, name in _SCALES:
        if n >= value:
            words.append(f"{_below_thousand(n // value)} {name}")
            n %= value
    if n:
        words.append(_below_thousand(n))
    return " ".join(words)


def number_to_words(x: float, max_decimals: int = 2) -> str:
    """Words for an int or float; floats are rounded as :func:`rounded` does and read digit by digit after
    'point'."""
    if isinstance(x, bool):
        raise TypeError("a boolean is not a number")
    if isinstance(x, int):
        return int_to_words(x)
    if not math.isfinite(x):
        raise ValueError(f"not a finite number: {x}")
    x = rounded(float(x), max_decimals)
    if x == int(x):
        return int_to_words(int(x))
    sign = "minus " if x < 0 else ""
    whole, frac = _decimal_text(abs(x)).split(".")
    return sign + int_to_words(int(whole)) + " point " + " ".join(_ONES[int(d)] for d in frac)


def rounded(x: float, decimals: int) -> float:
    """``x`` to ``decimals`` places, or, when it is smaller than the last of them, to :data:`SIGNIFICANT`
    figures (at most :data:`MAX_DECIMALS` places): a small result is said, not rounded away to zero. A value
    of at least one unit of the last place rounds as it always has: the results the model was trained on."""
    if x == 0 or abs(x) >= 10.0**-decimals:
        return round(x, decimals)
    return round(x, min(MAX_DECIMALS, SIGNIFICANT - 1 - math.floor(math.log10(abs(x)))))


def _decimal_text(x: float) -> str:
    """The shortest digits that are ``x`` (999999999999999.9, not '...999.88' as '.2f' writes it), never in
    exponent form (0.00001, not '1e-05')."""
    return format(Decimal(repr(x)), "f")


def sayable(x: float, what: str) -> float:
    """``x``, when a reply could say it (finite, under :data:`MAX_SPOKEN`); else a ValueError saying ``what`` is
    not (``what``, not ``x``: 10**400 has too many digits for a message)."""
    if isinstance(x, float) and not math.isfinite(x):
        raise ValueError(f"{what} is not a finite number")
    if abs(x) >= MAX_SPOKEN:
        raise ValueError(f"{what} is too large")
    return x


def join_digit_groups(text: str) -> str:
    """``text`` with the commas that group digits taken out: "1,500" is one number, fifteen hundred."""
    return _DIGIT_GROUP_COMMA.sub("", text)


def ordinal_words(n: int) -> str:
    """Ordinal words for dates: 14 -> 'fourteenth', 21 -> 'twenty-first'."""
    words = int_to_words(n)
    cut = max(words.rfind(" "), words.rfind("-")) + 1
    head, last = words[:cut], words[cut:]
    if last in _ORDINAL_IRREGULAR:
        last = _ORDINAL_IRREGULAR[last]
    elif last.endswith("y"):
        last = last[:-1] + "ieth"
    else:
        last += "th"
    return head + last


def format_number(x: float, max_decimals: int = 4) -> int | float:
    """A JSON-friendly value: rounded as :func:`rounded` does, and whole floats become ints ('212', not
    '212.0'); a non-finite one is refused, as JSON has no infinity."""
    if isinstance(x, float):
        if not math.isfinite(x):
            raise ValueError(f"not a finite number: {x}")
        x = rounded(x, max_decimals)
        if x == int(x) and abs(x) < MAX_SPOKEN:
            return int(x)
    return x
