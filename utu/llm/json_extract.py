"""Find the JSON value in a model's text reply: bare, fenced in ```json, or wrapped in prose.

Models quote LaTeX inside JSON strings without doubling its backslashes: `"\\boxed{3}"` is an invalid escape
and `"\\frac"` or `"\\text"` are valid ones that silently turn into control characters. Backslashes that
start a LaTeX command or are no JSON escape at all are read as literal backslashes.
"""

import json
import re

_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)
# A backslash not itself escaped (an even run of backslashes before it) that is either no JSON escape, or
# begins a LaTeX command whose first letter happens to be one (\b \f \n \r \t followed by more letters).
_LATEX_COMMANDS = (
    r"b(?:oxed|egin|eta|ar|inom|f|ig|ot)|f(?:rac|orall|loor)|n(?:eq|abla|ot|u|ewline|i|eg|mid)"
    r"|r(?:ight|ho|angle|ceil|floor|m|brace)|t(?:ext|imes|heta|au|an|frac|ilde|op|o\b|riangle|extbf)"
)
_STRAY_BACKSLASH = re.compile(r"(?<!\\)((?:\\\\)*)\\(?=(?:" + _LATEX_COMMANDS + r')|[^"\\/bfnrtu])')


def extract_json(text: str) -> object:
    """Return the first JSON object or array found in `text`; raise ValueError if there is none."""
    stripped = text.strip()
    if not stripped:
        raise ValueError("the reply is empty")
    for candidate in (stripped, _STRAY_BACKSLASH.sub(r"\1\\\\", stripped)):
        value = _first_json(candidate)
        if value is not None:
            return value
    raise ValueError("no JSON object or array found in the reply")


def _first_json(text: str) -> object | None:
    if "\\" in text and _STRAY_BACKSLASH.search(text):
        return None  # let the repaired text be read instead
    try:
        return json.loads(text, strict=False)  # strict=False: raw newlines and tabs inside strings are fine
    except json.JSONDecodeError:
        pass
    for block in _FENCE.findall(text):
        try:
            return json.loads(block.strip(), strict=False)
        except json.JSONDecodeError:
            continue
    decoder = json.JSONDecoder(strict=False)
    for i, ch in enumerate(text):
        if ch in "{[":
            try:
                value, _ = decoder.raw_decode(text, i)
                return value
            except json.JSONDecodeError:
                continue
    return None
