"""Numbers as a speaker says them ("forty-eight", "three point five"), so replies can go straight to TTS."""

from __future__ import annotations

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
    """Words for an int or float; floats are rounded to `max_decimals` and read digit by digit after 'point'."""
    if isinstance(x, bool):
        raise TypeError("a boolean is not a number")
    if isinstance(x, int):
        return int_to_words(x)
    x = round(float(x), max_decimals)
    if x != x or x in (float("inf"), float("-inf")):
        raise ValueError(f"not a finite number: {x}")
    if x == int(x):
        return int_to_words(int(x))
    sign = "minus " if x < 0 else ""
    whole, frac = f"{abs(x):.{max_decimals}f}".split(".")
    frac = frac.rstrip("0")
    return sign + int_to_words(int(whole)) + " point " + " ".join(_ONES[int(d)] for d in frac)


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
    """A JSON-friendly value: rounded, and whole floats become ints ('212', not '212.0')."""
    if isinstance(x, float):
        x = round(x, max_decimals)
        if x == int(x) and abs(x) < MAX_SPOKEN:
            return int(x)
    return x
