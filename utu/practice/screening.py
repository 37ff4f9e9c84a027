"""The library refuses junk: every experience a learner proposes is checked before it is applied.

An experience must be one sentence of the documented shape "When <condition>, <strategy>.", free of JSON
or template fragments, must not copy its source question, must not carry that question's numbers, names,
objects ("yellow balloons", or "puppies" said twice) or its answer, and must not say again what an
experience already in the library says, nor say much the same under the same condition. `screen` gives the
reason for a refusal (recorded in the operation log), or None.
"""

import itertools
import re
from dataclasses import dataclass, field
from difflib import SequenceMatcher

from utu.practice.schemas import MAX_EXPERIENCE_CHARS

MIN_CHARS = 15
COPY_WORDS = 6  # this many consecutive words of a source question make a copy
NEAR_DUPLICATE = 0.8  # similarity ratio of two experiences' normalised words
SAME_CONDITION_OVERLAP = 0.4  # the same ratio for the strategies of two experiences with one condition
# LaTeX commands with their braces (\boxed{}, \frac{a}{b}) are allowed; other braces are template slots.
_LATEX = re.compile(r"\\[A-Za-z]+(\{[^{}]*\})*")
_FRAGMENT = re.compile(r'[{}\[\]"]|\\n|\b(?:null|true|false)\b|\b(?:ADD|UPDATE|DELETE)\b|</?\w+>')
_SENTENCE_BREAK = re.compile(r"[.!?]\s+[A-Z]")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_WORD = re.compile(r"[a-z0-9]+")
_CAPITALISED = re.compile(r"\b[A-Z][a-z]+\b")
# Words of the strategy language (function words, arithmetic, quantities, units of measure): two
# other words side by side, in a proposal and in its question, are that question's objects ("walnut trees").
_STRATEGY_WORDS = set(
    """the and but for nor yet not any all each every some many much more most less least few fewer other
    another same such than then that this these those there their them they what which who whom whose when
    where why how with without from into onto over under above below about after before between during per
    its his her him she you your our has have had was were are been being does did doing done can could will
    would should must may might shall get gets got give gives gave given take takes took taken make makes made
    find found need needs ask asks asked say says said tell know use uses used
    problem problems question questions answer answers result results number numbers amount amounts quantity
    quantities value values total totals sum sums difference differences product products quotient quotients
    part parts whole group groups item items thing things unit units rate rates ratio ratios percent percentage
    price prices cost costs money dollar dollars cent cents time times hour hours minute minutes second seconds
    day days week weeks month months year years left remaining remain remains altogether together first last
    final initial original new old one two three four five six seven eight nine ten hundred thousand half
    double twice triple add adds added adding addition subtract subtracts subtracted subtracting subtraction
    multiply multiplies multiplied multiplying multiplication divide divides divided dividing division
    compute calculate calculating count counting equal equals step steps strategy operation operations
    smaller larger bigger greater fewer start end begin
    inch inches foot feet yard yards mile miles meter meters centimeter centimeters kilometer kilometers
    ounce ounces pound pounds gram grams kilogram kilograms ton tons liter liters gallon gallons quart quarts
    cup cups degree degrees""".split()
)
# The frame a strategy is said in ("the strategy is to", "you should", "it is important to"): not what it says.
_STRATEGY_FRAME = set(
    "the a an is are be to it its it's s this that strategy should must can could need needs you we they agent "
    "assistant important always then and".split()
)
_SENTENCE_STARTERS = set(
    "The A An She He It They We You There This That These Those How What Which Who Why When Where If Each "
    "Every All After Before Then So But And Or In On At For From To Of By With Now Today Find Calculate".split()
)


@dataclass
class Source:
    """What a proposal was learned from: its questions and their answers."""

    texts: list[str] = field(default_factory=list)

    @property
    def names(self) -> set[str]:
        """Capitalised words of the questions (Mary, Seattle), less the words that only start a sentence."""
        return {w for text in self.texts for w in _CAPITALISED.findall(text)} - _SENTENCE_STARTERS

    @property
    def numbers(self) -> set[str]:
        return {n.replace(",", "") for text in self.texts for n in _NUMBER.findall(text)}


def screen(text: str, source: Source, others: list[str]) -> str | None:
    """Why `text` may not enter the library, or None. `others`: the experiences it must not repeat."""
    shape = _shape_problem(text)
    if shape:
        return shape
    numbers = set(_NUMBER.findall(text))
    specific = sorted({n for n in numbers if _is_specific(n, source)}, key=len)
    shared = sorted(n for n in numbers if n.replace(",", "") in source.numbers)
    if not specific and len(shared) >= 2:  # single digits, but several of its question's: a worked example
        specific = shared
    if specific:
        return f"names numbers of its question ({', '.join(specific[:3])}): an experience must hold for other questions"
    copied = _copied_words(text, source)
    if copied:
        return f"copies its question ({copied!r})"
    names = [w for w in _CAPITALISED.findall(text)[1:] if w in source.names]
    if names:
        return f"names {names[0]!r} from its question: an experience must hold for other questions"
    objects = _question_objects(text, source) or _counted_object(text, source)
    if objects:
        return f"names {objects!r} from its question: an experience must hold for other questions"
    for other in others:
        if similarity(text, other) >= NEAR_DUPLICATE:
            return f"near-duplicate of an existing experience ({other[:60]!r})"
        if _says_again_under_its_condition(text, other):
            return (
                f"the same condition and much the same strategy as an existing experience ({other[:60]!r}): "
                "update that one instead"
            )
        if _same_strategy(text, other):
            return (
                f"the same strategy as an existing experience ({other[:60]!r}): update that one (widen its "
                "condition) instead"
            )
    return None


def _shape_problem(text: str) -> str | None:
    if not MIN_CHARS <= len(text) <= MAX_EXPERIENCE_CHARS:
        return f"not {MIN_CHARS}-{MAX_EXPERIENCE_CHARS} characters long ({len(text)})"
    if not text.startswith("When ") or "," not in text or not text.endswith("."):
        return 'not of the form "When <condition>, <strategy>."'
    plain = _LATEX.sub("x", text)
    fragment = _FRAGMENT.search(plain)
    if fragment:
        return f"contains a JSON or template fragment ({fragment.group(0).strip()!r})"
    if _SENTENCE_BREAK.search(plain[:-1]):
        return "more than one sentence"
    if plain.count("(") != plain.count(")"):  # the grammar ends the sentence at its first period: "(e.g." -> "(e."
        return "cut off mid-sentence (a parenthesis left open)"
    return None


def _is_specific(number: str, source: Source) -> bool:
    """A number of the source question or answer, other than a single digit (which rules may need: "x 2")."""
    value = number.replace(",", "")
    return len(value) > 1 and value in source.numbers


def _copied_words(text: str, source: Source) -> str | None:
    words = _WORD.findall(text.lower())
    runs = {" ".join(words[i : i + COPY_WORDS]) for i in range(len(words) - COPY_WORDS + 1)}
    for question in source.texts:
        normalised = " ".join(_WORD.findall(question.lower()))
        for run in runs:
            if run in normalised:
                return run
    return None


def _question_objects(text: str, source: Source) -> str | None:
    """Two words side by side, neither of the strategy language, that its question also has side by side."""
    words = _WORD.findall(text.lower())
    pairs = {f"{a} {b}" for a, b in itertools.pairwise(words) if _story_word(a) and _story_word(b)}
    for question in source.texts:
        normalised = f" {' '.join(_WORD.findall(question.lower()))} "
        for pair in sorted(pairs):
            if f" {pair} " in normalised:
                return pair
    return None


def _counted_object(text: str, source: Source) -> str | None:
    """A plural story word its question has, said twice: the count of that question's objects, under a
    condition and in a strategy ("When the initial number of puppies is known, ... the number of puppies")."""
    words = _WORD.findall(text.lower())
    repeated = sorted({w for w in words if w.endswith("s") and _story_word(w) and words.count(w) >= 2})
    if not repeated:
        return None
    question_words = {w for question in source.texts for w in _WORD.findall(question.lower())}
    return next((w for w in repeated if w in question_words), None)


def _story_word(word: str) -> bool:
    return len(word) > 2 and word.isalpha() and word not in _STRATEGY_WORDS


def _says_again_under_its_condition(text: str, other: str) -> bool:
    """Same "When <condition>" and a strategy that overlaps the other's: a reworded duplicate the whole-sentence
    ratio misses ("..., always add them together step by step." / "..., the strategy is to add them together.").
    A different strategy under the same condition is new knowledge and is kept."""
    condition, _, strategy = text.partition(",")
    other_condition, _, other_strategy = other.partition(",")
    same = _WORD.findall(condition.lower()) == _WORD.findall(other_condition.lower())
    return same and similarity(strategy, other_strategy) >= SAME_CONDITION_OVERLAP


def _same_strategy(text: str, other: str) -> bool:
    """Strategies alike in what they say to do, whatever the condition and the wording around it
    ("the strategy is to add the numbers together" / "you should add the two numbers together")."""
    ours, theirs = (_doing_words(t.partition(",")[2]) for t in (text, other))
    return bool(ours and theirs) and SequenceMatcher(None, ours, theirs).ratio() >= NEAR_DUPLICATE


def _doing_words(strategy: str) -> list[str]:
    return [w for w in _WORD.findall(strategy.lower()) if w not in _STRATEGY_FRAME]


def similarity(a: str, b: str) -> float:
    return SequenceMatcher(None, _WORD.findall(a.lower()), _WORD.findall(b.lower())).ratio()
