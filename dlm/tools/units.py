"""Unit conversion from a table: each unit is a factor to its dimension's base unit (temperature is affine)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from dlm.tools.numbers import sayable


@dataclass(frozen=True)
class Unit:
    """A unit's dimension and how to reach the base unit: base = value * scale + offset. ``also``: other names
    a caller may say for it ("metres", "kilos")."""

    dimension: str
    scale: float
    offset: float = 0.0
    singular: str = ""
    plural: str = ""
    also: tuple[str, ...] = ()


UNITS: dict[str, Unit] = {
    "m": Unit("length", 1.0, singular="meter", plural="meters", also=("metre", "metres")),
    "km": Unit("length", 1000.0, singular="kilometer", plural="kilometers", also=("kilometre", "kilometres", "km")),
    "cm": Unit("length", 0.01, singular="centimeter", plural="centimeters", also=("centimetre", "centimetres", "cm")),
    "mm": Unit("length", 0.001, singular="millimeter", plural="millimeters", also=("millimetre", "millimetres", "mm")),
    "mi": Unit("length", 1609.344, singular="mile", plural="miles"),
    "ft": Unit("length", 0.3048, singular="foot", plural="feet"),
    "in": Unit("length", 0.0254, singular="inch", plural="inches"),
    "yd": Unit("length", 0.9144, singular="yard", plural="yards"),
    "kg": Unit("mass", 1.0, singular="kilogram", plural="kilograms", also=("kilo", "kilos", "kg")),
    "g": Unit("mass", 0.001, singular="gram", plural="grams"),
    "lb": Unit("mass", 0.45359237, singular="pound", plural="pounds", also=("lbs",)),
    "oz": Unit("mass", 0.028349523125, singular="ounce", plural="ounces", also=("oz",)),
    "l": Unit("volume", 1.0, singular="liter", plural="liters", also=("litre", "litres")),
    "ml": Unit("volume", 0.001, singular="milliliter", plural="milliliters", also=("millilitre", "millilitres", "ml")),
    "gal": Unit("volume", 3.785411784, singular="gallon", plural="gallons"),
    "cup": Unit("volume", 0.2365882365, singular="cup", plural="cups"),
    "c": Unit("temperature", 1.0, singular="degree celsius", plural="degrees celsius", also=("celsius", "centigrade")),
    "f": Unit("temperature", 5 / 9, -32 * 5 / 9, singular="degree fahrenheit", plural="degrees fahrenheit",
              also=("fahrenheit",)),
    "k": Unit("temperature", 1.0, -273.15, singular="kelvin", plural="kelvin"),
    "kmh": Unit("speed", 1 / 3.6, singular="kilometer per hour", plural="kilometers per hour", also=("kph",)),
    "mph": Unit("speed", 0.44704, singular="mile per hour", plural="miles per hour", also=("mph",)),
}
ABSOLUTE_ZERO = UNITS["k"].offset  # 0 K in the temperature base unit (celsius)
# how far below absolute zero float arithmetic may land from it: -459.67 °F is -273.15000000000003 °C
_ABSOLUTE_ZERO_SLACK = 1e-9


def convert(value: float, from_unit: str, to_unit: str) -> float:
    """`value` in `from_unit` expressed in `to_unit`; both must share a dimension. A value or a result the
    reply could not say (not finite, or too large) is refused, and so is a temperature below absolute zero."""
    try:
        src, dst = UNITS[from_unit], UNITS[to_unit]
    except KeyError as err:
        raise ValueError(f"unknown unit {err.args[0]!r}; known units: {', '.join(UNITS)}") from None
    if src.dimension != dst.dimension:
        raise ValueError(f"cannot convert {src.dimension} ({from_unit}) to {dst.dimension} ({to_unit})")
    base = sayable(value, "the value") * src.scale + src.offset
    if src.dimension == "temperature" and base < ABSOLUTE_ZERO - _ABSOLUTE_ZERO_SLACK:
        raise ValueError(f"{value} {src.plural} is below absolute zero")
    return sayable((base - dst.offset) / dst.scale, "the result")


@cache
def spoken_units() -> dict[str, str]:
    """Each name a caller may say for a unit (singular, plural and ``also``), to the unit's code."""
    return {name: code for code, unit in UNITS.items() for name in (unit.singular, unit.plural, *unit.also)}


def unit_name(code: str, value: float) -> str:
    """The spoken unit name agreeing with the value ('one mile', 'minus one degree', 'two miles')."""
    unit = UNITS[code]
    return unit.singular if abs(value) == 1 else unit.plural
