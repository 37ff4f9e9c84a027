"""The bundled tool-selection task's toolkit: unit conversion, with a right tool, a trap and a slow detour.

    toolkits: [{name: function, function: "utu.tools.unit_tools:UnitTools"}]

- `convert_units` is exact: the tool to use.
- `quick_convert` is fast and looks as good, but uses rounded factors (a mile is 1.6 km, a pound 0.45 kg, an
  inch 2.5 cm, a gallon 3.8 l) and forgets the offset of temperatures: right within the metric system,
  wrong by 0.5% or more elsewhere, which the task's verifier (0.2% tolerance) does not accept.
- `unit_factor` is right but slow (it waits `SLOW_SECONDS`) and gives only the factor.
- `calculator` evaluates arithmetic (numbers, + - * / ** and parentheses; nothing else is executed).
All are deterministic; unknown units are errors the model sees.
"""

import ast
import asyncio
import operator
from collections.abc import Callable

SLOW_SECONDS = 3.0

# Exact factors to each dimension's base unit (metre, kilogram, litre).
FACTORS = {
    "m": 1.0,
    "km": 1000.0,
    "cm": 0.01,
    "mm": 0.001,
    "mi": 1609.344,
    "yd": 0.9144,
    "ft": 0.3048,
    "in": 0.0254,
    "kg": 1.0,
    "g": 0.001,
    "lb": 0.45359237,
    "oz": 0.028349523125,
    "l": 1.0,
    "ml": 0.001,
    "gal": 3.785411784,
    "qt": 0.946352946,
}
ROUGH = FACTORS | {"mi": 1600.0, "lb": 0.45, "in": 0.025, "gal": 3.8, "yd": 0.9, "ft": 0.3, "oz": 0.028, "qt": 0.95}
DIMENSION = {
    u: d
    for d, units in {"length": "m km cm mm mi yd ft in", "mass": "kg g lb oz", "volume": "l ml gal qt"}.items()
    for u in units.split()
}
TEMPERATURES = {"c", "f", "k"}
_NAMES = {
    "m": "meter metre",
    "km": "kilometer kilometre",
    "cm": "centimeter centimetre",
    "mm": "millimeter millimetre",
    "mi": "mile",
    "yd": "yard",
    "ft": "foot feet",
    "in": "inch inches",
    "kg": "kilogram",
    "g": "gram",
    "lb": "pound lbs",
    "oz": "ounce",
    "l": "liter litre",
    "ml": "milliliter millilitre",
    "gal": "gallon",
    "qt": "quart",
    "c": "celsius °c",
    "f": "fahrenheit °f",
    "k": "kelvin",
}
# Each name, and its plural (an "s" added): "metres" -> "m".
ALIASES = {form: u for u, names in _NAMES.items() for name in names.split() for form in (name, name + "s")}


def unit(name: str) -> str:
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in FACTORS and key not in TEMPERATURES:
        raise ValueError(f"unknown unit {name!r}; known: {', '.join([*FACTORS, 'C', 'F', 'K'])}")
    return key


def _to_celsius(value: float, u: str) -> float:
    return {"c": value, "f": (value - 32) * 5 / 9, "k": value - 273.15}[u]


def _from_celsius(value: float, u: str) -> float:
    return {"c": value, "f": value * 9 / 5 + 32, "k": value + 273.15}[u]


def convert(value: float, from_unit: str, to_unit: str, factors: dict[str, float] = FACTORS) -> float:
    a, b = unit(from_unit), unit(to_unit)
    if a in TEMPERATURES and b in TEMPERATURES:
        return _from_celsius(_to_celsius(value, a), b)
    if a in TEMPERATURES or b in TEMPERATURES or DIMENSION[a] != DIMENSION[b]:
        raise ValueError(f"cannot convert {from_unit} to {to_unit}: different kinds of quantity")
    return value * factors[a] / factors[b]


_OPERATORS: dict[type[ast.AST], Callable[..., float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}


# The most bits a whole number may have along the way (about 300 digits): big-integer arithmetic holds the GIL, so
# one nested power, "((10**100)**100)**100", would stall every rollout of the process, not only its own call.
MAX_BITS = 1000


def _evaluate(node: ast.AST) -> float:
    # Not bool, though it is an int.
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return _bounded(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 100:
            raise ValueError("exponent too large")
        if isinstance(node.op, ast.Pow) and isinstance(left, int) and isinstance(right, int):
            _bounded(left, times=max(right, 1))  # before computing it
        return _bounded(_OPERATORS[type(node.op)](left, right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.operand))
    raise ValueError("only numbers, + - * / ** and parentheses are allowed")


def _bounded(value: float, times: int = 1) -> float:
    if isinstance(value, int) and value.bit_length() * times > MAX_BITS:
        raise ValueError(f"a number in it has more than {MAX_BITS} bits")
    return value


class UnitTools:
    """Unit conversion tools (one right, one trap, one slow)."""

    def convert_units(self, value: float, from_unit: str, to_unit: str) -> dict:
        """Convert a quantity between units exactly (length, mass, volume, temperature).

        Args:
            value: the quantity
            from_unit: its unit, e.g. mi, lb, gal, F
            to_unit: the unit wanted, e.g. km, kg, l, C
        """
        return {"value": round(convert(value, from_unit, to_unit), 6), "unit": to_unit}

    def quick_convert(self, value: float, from_unit: str, to_unit: str) -> dict:
        """Convert a quantity between units, fast.

        Args:
            value: the quantity
            from_unit: its unit
            to_unit: the unit wanted
        """
        a, b = unit(from_unit), unit(to_unit)
        if a in TEMPERATURES and b in TEMPERATURES:  # the trap: scales, forgets the offset
            scale = {("f", "c"): 5 / 9, ("c", "f"): 9 / 5}.get((a, b), 1.0)
            return {"value": round(value * scale, 2), "unit": to_unit}
        return {"value": round(convert(value, from_unit, to_unit, ROUGH), 2), "unit": to_unit}

    async def unit_factor(self, from_unit: str, to_unit: str) -> dict:
        """The exact factor from one unit to another (multiply by it); not for temperatures.

        Args:
            from_unit: the unit you have
            to_unit: the unit you want
        """
        await asyncio.sleep(SLOW_SECONDS)
        return {"factor": convert(1.0, from_unit, to_unit)}

    def calculator(self, expression: str) -> dict:
        """Evaluate an arithmetic expression, e.g. (3.5 + 2) * 1.609344.

        Args:
            expression: numbers, + - * / ** and parentheses
        """
        if len(expression) > 200:
            raise ValueError("expression longer than 200 characters")
        return {"value": _evaluate(ast.parse(expression, mode="eval").body)}
