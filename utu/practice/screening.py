"""The library refuses junk: every experience a learner proposes is checked before it is applied.

What separates junk from knowledge is not the topic or the language of a proposal but the particulars of the
question it was learned from, and whether it says what to do. A proposal is refused when it
- is too short or too long, or more sentences than an experience takes, or cut off (a parenthesis left open);
- holds a JSON or template fragment (`{name}`, `"content":`, our prompts' `<condition>`, a library id `[G3]`);
- copies a run of its question's words, gives its question's answer, or retells the object its question
  counts ("the initial number of peaches ... the final number of peaches", within its condition or its strategy);
- carries more than `max_particulars` of its question's particulars: its names ("Mary", "Seattle"; twice for
  one who acts in it) and its numbers (one of two or more digits, or several small ones: a worked example;
  twice with the word the question gives it, "56 passengers");
- speaks of what only the learner saw: the verifier, its note ("extracted 11; gold 11.33"), an attempt by its
  number or its reward (our prompts' labels, in English whatever the task's language: the agent never sees them);
- states a fact instead of saying what to do, in a language whose words we have (screening_words.yaml);
- says again what an experience already in the library says, or much the same under the same condition.
Topic words are not particulars: "When a problem involves a regular hexagon, split it into six equilateral
triangles." passes whatever its question. What screening lets through is judged by the validation gate.

`screen` gives the reason for a refusal (recorded in the operation log), or None. Every threshold is a knob
of `practice.screening` (`ScreeningConfig`); `enabled: false` turns every check but exact duplicates off.
"""

import re
from dataclasses import dataclass, field
from decimal import ROUND_DOWN, ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal
from difflib import SequenceMatcher
from functools import cache
from importlib import resources

import yaml

from utu.config.models import ScreeningConfig
from utu.practice.outcomes import Refusal, Refused

DEFAULTS = ScreeningConfig()
# Math is allowed: $...$ and \(...\) spans, LaTeX commands with their braces (\boxed{\frac{1}{2}}) and
# sub- and superscripts (x_{n+1}, e^{x}); other braces are template slots.
_BRACED = r"\{(?:[^{}]|\{(?:[^{}]|\{[^{}]*\})*\})*\}"  # up to three levels deep
_MATH = re.compile(rf"\$[^$\n]*\$|\\\(.*?\\\)|\\[A-Za-z]+(?:{_BRACED})*|[_^]{_BRACED}|\\[{{}}]")
# The learner's own templates: our prompts' tags and a library id; JSON keys and values.
_TEMPLATE_TAGS = "condition|strategy|topic|question|ground_truth|attempts|trajectory|critique|outcome|existing_library|new_experiences|proposed_operations|experience|refused_because"  # noqa: E501
_FRAGMENT = re.compile(rf'[{{}}]|"\s*:\s*(?:["\[{{\d-]|null|true|false)|</?(?:{_TEMPLATE_TAGS})>|\[G\d+\]')
_NEWLINE_ESCAPE = re.compile(r"\\n(?![a-z])")  # a literal "\n" (not \nabla, \neq)
# A sentence ends at . ! ? before a capital, unless the period closes an initial or abbreviation (U.S., vs.).
_SENTENCE_END = re.compile(r"(?<!\b[A-Z])(?<!\bvs)(?<!\betc)(?<!\bNo)(?<!\bDr)(?<!\bSt)[.!?](?=\s+[A-Z])|[。！？](?=.)")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
# The labels of the learner's prompts (prompts.py): "Attempt 2 (reward 0)", "Verifier: extracted 11; gold 11.33".
# "the verifier" and a capital "Attempt 2" are those labels; "run a verifier step", "before attempt 2" are advice.
_LEARNER_VIEW = re.compile(
    r"\b(?i:the\s+verifier)\b|\b(?i:extracted)\b.*\b(?i:gold)\b|\bAttempt \d|\b(?i:reward) [01]\b"
)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff]")
_KANA = re.compile(r"[\u3040-\u30ff]")  # Japanese, which has no word list: never taken for Chinese
_TOKEN = re.compile(r"[a-z0-9]+(?:['-][a-z0-9]+)*|[\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff]")
_CAPITALISED = re.compile(r"\b[A-Z][a-z]+\b")
_NAME_RUN = re.compile(r"\b[A-Z][a-z]+(?:\s+[A-Z][a-z]+)*\b")
# A clause starts at the text's start, after "When ...," or "Title:", after , ; and after ", and", ", then"
# or "and then" ("easier to understand and solve" is no instruction).
_CLAUSE_START = re.compile(r"(?:^|[,;:]\s*(?:(?:and|then|or)\s+)?|\band then\s+)([A-Za-z][A-Za-z'-]*)")
_SPLIT = re.compile(r"^(?:when|if|whenever|for|once)\b[^,]*,|^[^:,.]{2,80}:\s|^[^，：。]{1,40}[，：]", re.IGNORECASE)


@dataclass
class Question:
    """A question an experience was learned from, and its answer."""

    text: str
    answer: str | None = None


@dataclass
class Source:
    """What a proposal was learned from: the questions of its step, whose particulars it must not carry, and
    among them its own (a learner's record of them can be wrong), whose answers it must not give."""

    questions: list[Question] = field(default_factory=list)
    own: list[Question] | None = None  # None: all of `questions`

    @property
    def answered(self) -> list[Question]:
        return self.questions if self.own is None else self.own


@cache
def words() -> dict[str, dict]:
    """The per-language word lists (utu/practice/screening_words.yaml)."""
    text = resources.files("utu.practice").joinpath("screening_words.yaml").read_text(encoding="utf-8")
    return {
        lang: {k: set(v) if isinstance(v, list) else v for k, v in entry.items()}
        for lang, entry in yaml.safe_load(text).items()
    }


def screen(text: str, source: Source, others: list[str], config: ScreeningConfig = DEFAULTS) -> str | None:
    """Why `text` may not enter the library, or None. `others`: the experiences it must not repeat."""
    refused = verdict(text, source, others, config)
    return refused.detail if refused else None


def verdict(text: str, source: Source, others: list[str], config: ScreeningConfig = DEFAULTS) -> Refused | None:
    """`screen`, with the kind of the refusal: the answer given, the library repeated, or not a general rule."""
    if not config.enabled:
        return Refused(Refusal.REPEATS_LIBRARY, f"the same text as {EXISTING}") if text in others else None
    for check in (_shape, *_TOLD_AS_ITS_QUESTION, _directive):
        reason = check(text, source, config)
        if reason:
            return Refused(Refusal.ANSWER_IN_TEXT if check is _answer else Refusal.SCREENED, reason)
    reason = repeated(text, others, config)
    return Refused(Refusal.REPEATS_LIBRARY, reason) if reason else None


def tells_its_story(text: str, source: Source, config: ScreeningConfig = DEFAULTS) -> str | None:
    """Why `text` is refused, if it is a strategy refused only for details of its own question around it; else
    None. The details: its words copied, the object it counts retold, its names or numbers; and, in the condition
    only, what only the learner saw (the verifier's note), and its answer, in the strategy too when the strategy
    says more than its answer (a worked example that says what to do). Such a proposal may hold a good strategy
    told as its question ("When Lena cuts her 5 m rope into 20 cm pieces, convert the metres to centimetres
    first"; "When the verifier extracts 0 grams and gold 30 grams, the strategy is to convert the kilograms to
    grams before dividing"), which the learner can restate for any question of its kind; so may a strategy told
    with the verifier as the one who does it ("..., the verifier should convert the kilograms to grams before
    dividing"); so may a worked example that says what to do ("..., the strategy is to first convert the juice
    from litres to millilitres (2000 millilitres), then divide by the volume of one cup (100 millilitres) to find
    the number of cups Maria fills (20)."). Final: a text of the wrong shape, a story that states a fact ("...,
    the number of pieces is 0."; restated, it became a strategy made up), and a strategy that is the answer or is
    about the verifier ("When asked, always answer 12."; "When unsure, write what the verifier expects.")."""
    if not config.enabled or _shape(text, source, config) or _directive(text, source, config):
        return None
    for check in _TOLD_AS_ITS_QUESTION:
        reason = check(text, source, config)
        if not reason:
            continue
        if check in _IN_THE_CONDITION_ONLY:
            condition, strategy = (part.strip() for part in split(text))
            strategy = _VERIFIER_AS_ACTOR.sub("", strategy)
            answer_only = _answer(strategy, source, config) and not _more_than_numbers(strategy)
            if (
                not condition
                or answer_only
                or _learner_view(strategy, source, config)
                or _directive(strategy, source, config)
            ):
                return None
        return reason
    return None


# Named by every refusal for repeating what the library (or the step's update so far) already holds: a refusal
# for the library's state, not for what the text says.
EXISTING = "an existing experience"


def repeated(text: str, others: list[str], config: ScreeningConfig = DEFAULTS) -> str | None:
    """Why `text` says again what one of `others` says, or None."""
    for other in others:
        reason = _repeats(text, other, config)
        if reason:
            return f"{reason} ({other[:60]!r})"
    return None


def _shape(text: str, source: Source, config: ScreeningConfig) -> str | None:
    if not config.min_chars <= len(text) <= config.max_chars:
        return f"not {config.min_chars}-{config.max_chars} characters long ({len(text)})"
    plain = _MATH.sub("x", text)
    fragment = _NEWLINE_ESCAPE.search(text) or _FRAGMENT.search(plain)
    if fragment:
        return f"contains a JSON or template fragment ({fragment.group(0).strip()!r})"
    sentences = len(_SENTENCE_END.findall(plain.replace("e.g.", "eg").replace("i.e.", "ie"))) + 1
    if sentences > config.max_sentences:
        return f"{sentences} sentences: an experience is at most {config.max_sentences}"
    if plain.count("(") > plain.count(")") or plain.count("（") > plain.count("）"):
        return "cut off mid-sentence (a parenthesis left open)"
    return None


def _learner_view(text: str, source: Source, config: ScreeningConfig) -> str | None:
    found = _LEARNER_VIEW.search(text)
    return f"speaks of what only the learner saw ({found.group(0)!r}): the agent never sees it" if found else None


ANSWER_REFUSED = "gives its question's answer"


def _answer(text: str, source: Source, config: ScreeningConfig) -> str | None:
    for question in source.answered:
        if question.answer is not None and _gives_answer(text, question.answer):
            return f"{ANSWER_REFUSED} ({question.answer.strip()!r})"
    return None


def _story(text: str, source: Source, config: ScreeningConfig) -> str | None:
    tokens = _tokens(text)
    # Counted in the condition (or title) and the strategy apart: a title that names the topic and a strategy
    # that names it once more is topical advice ("Dividing juice into cups: ... divide by the volume of each cup
    # to find the number of cups."), and so, the price of it, is a trivial rule that names the object once in each
    # ("When puppies are given away, subtract the puppies given ..."), which the validation gate judges.
    condition, strategy = split(text)
    parts = [
        (f" in its {name}" if condition else "", _tokens(part))
        for name, part in (("condition", condition), ("strategy", strategy))
    ]
    for question in source.questions:
        theirs = _tokens(question.text)
        copied = _copied_run(tokens, theirs, config.copy_words)
        if copied:
            return f"copies its question ({copied!r})"
        for where, part in parts:
            repeated_object = _repeated_object(part, theirs, config.object_repeats)
            if repeated_object:
                return (
                    f"retells its question: says {repeated_object!r} {part.count(repeated_object)} times{where}, as "
                    "its question does (practice.screening.object_repeats)"
                )
        found = _numbers_of(text, question) + _names_of(text, question, config.persons_by_verb_form)
        count = sum(weight for _, weight in found)
        if count > config.max_particulars:
            named = ", ".join(what for what, _ in found[:3])
            return (
                f"names {count} particulars of its question ({named}): an experience must hold for other questions "
                f"(at most {config.max_particulars}; practice.screening.max_particulars)"
            )
    return None


# A strategy that gives its answer and says this many words besides its numbers and its frame says what to do as
# well: "first convert the juice from litres to millilitres (2000 millilitres), then divide ... (20)" is a worked
# example a restatement can keep; "always answer 12" is not.
_MORE_THAN_NUMBERS = 6


def _more_than_numbers(strategy: str) -> bool:
    return len(_doing_words(_NUMBER.sub(" ", strategy))) >= _MORE_THAN_NUMBERS


# What a text may carry of its own question as the learner saw it, in the order `screen` checks them: a
# restatement drops it and keeps the strategy.
_TOLD_AS_ITS_QUESTION = (_learner_view, _answer, _story)
# Restated only when their fault is the condition's: a strategy that is the answer, or is about the verifier,
# would lose all it says ("always answer 12").
_IN_THE_CONDITION_ONLY = (_learner_view, _answer)
# ... or its actor: the 1.5B wrote the right strategy as the verifier's ("the verifier should convert the total
# amount of juice from litres to millilitres before dividing", 2026-11-26) and restated it as the agent's, 5 of 5
# (benchmarks/results/restate_qwen25_coder_15b.json).
# Not when the verb is the grader's own ("the verifier should accept any number"): that is advice about the verifier.
_VERIFIER_AS_ACTOR = re.compile(
    r"(?i)^the\s+verifier\s+(?:should|must|needs?\s+to|has\s+to|is\s+to)\s+(?:first\s+)?"
    r"(?!(?:accept|mark|grade|score|credit|reward|expect|extract|read|see|check|compare|receive|give|judge|ignore|"
    r"round|please)\b)"
)


def _directive(text: str, source: Source, config: ScreeningConfig) -> str | None:
    if not config.require_directive:
        return None
    lang = language(text)
    if lang is None or says_what_to_do(text, lang):
        return None
    return f"states a fact, not what to do ({lang}: no directive word of screening_words.yaml)"


def language(text: str) -> str | None:
    """The language of `text` among those with word lists, or None."""
    if _KANA.search(text):
        return None
    cjk = len(_CJK.findall(text))
    letters = sum(c.isalpha() for c in text) or 1
    tokens = set(_TOKEN.findall(text.lower()))
    for lang, entry in words().items():
        if entry.get("script") == "cjk":
            if cjk / letters >= 0.3:
                return lang
        elif cjk / letters < 0.3 and tokens & entry.get("detect", set()):
            return lang
    return None


def says_what_to_do(text: str, lang: str) -> bool:
    entry = words()[lang]
    if entry.get("script") == "cjk":
        return any(phrase in text for phrase in entry["directive_phrases"])
    tokens = _tokens(text)
    padded = f" {' '.join(tokens)} "
    if any(f" {' '.join(_tokens(phrase))} " in padded for phrase in entry["directive_phrases"]):
        return True
    verbs, fillers = entry.get("directive_verbs", set()), entry.get("clause_fillers", set())
    for match in _CLAUSE_START.finditer(text):
        rest = _TOKEN.findall(text[match.start(1) : match.start(1) + 120].lower())  # its first words
        while rest and rest[0] not in verbs and (rest[0] in fillers or rest[0].endswith("ly")):
            rest = rest[1:]
        if rest and (rest[0] in verbs or rest[0].rpartition("-")[2] in verbs):  # "cross-verify", "re-derive"
            return True
    return _prescribed(tokens, verbs)


_PASSIVE = {"is", "are", "be", "been", "gets", "get"}
_DESCRIBED = {"used", "needed", "required", "given", "found", "asked"}  # "is used to ...": a description


def _prescribed(tokens: list[str], verbs: set[str]) -> bool:
    """Advice in the passive: "the result is rounded up", "each length is converted to inches" (a directive
    verb's participle after is/are/be), which states what to do as what is done."""
    for before, word in zip(tokens, tokens[1:], strict=False):
        if before in _PASSIVE and word.endswith("ed") and word not in _DESCRIBED:
            stem = word[:-2]  # rounded -> round, converted -> convert
            # divided -> divide, dropped -> drop, simplified -> simplify
            verb_forms = {stem, stem + "e", stem[:-1]} | ({stem[:-1] + "y"} if stem.endswith("i") else set())
            if verb_forms & verbs:
                return True
    return False


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


def _copied_run(tokens: list[str], question: list[str], run_words: int) -> str | None:
    """`run_words` words of the question in a row (a CJK character counts as half a word)."""
    cjk = sum(bool(_CJK.match(t)) for t in tokens) > len(tokens) / 2
    n = run_words * 2 if cjk else run_words
    if len(tokens) < n:
        return None
    joiner = "" if cjk else " "
    haystack = f" {' '.join(question)} "
    for i in range(len(tokens) - n + 1):
        run = tokens[i : i + n]
        if f" {' '.join(run)} " in haystack:
            return joiner.join(run)
    return None


def _repeated_object(tokens: list[str], theirs: list[str], repeats: int) -> str | None:
    """A word a part of the text (`tokens`: its condition or title, or its strategy) and its question (`theirs`)
    each say `repeats` times or more, other than a generic one: the object that question counts, retold ("the
    initial number of peaches ... the final number of peaches")."""
    if not repeats:
        return None
    generic = _generic_words()
    return next(
        (
            w
            for w in dict.fromkeys(tokens)
            if len(w) > 2
            and w not in generic
            and w.isalpha()
            and tokens.count(w) >= repeats
            and theirs.count(w) >= repeats
        ),
        None,
    )


@cache
def _generic_words() -> set[str]:
    return set().union(*(entry.get("generic_words", set()) for entry in words().values()))


def _numbers(text: str) -> set[str]:
    """The numbers of a text, thousands separators dropped ("1,000" -> "1000")."""
    return {n.replace(",", "") for n in _NUMBER.findall(text)}


def _gives_answer(text: str, answer: str | None) -> bool:
    """The answer in the text, when an answer is distinctive: a number of two or more digits, or text other than
    a plain lower-case word ("Paris", "x^2+1"; not "yes" or "even"). A decimal answer counts rounded too: "the
    correct answer 732" gives 732.25 away."""
    value = (answer or "").strip().rstrip(".")
    if len(value) < 2 or (value.isalpha() and value.islower()):
        return False
    if _NUMBER.fullmatch(value.replace(",", "")):
        return bool(_number_forms(value.replace(",", "")) & _numbers(text))
    return re.search(rf"(?<!\w){re.escape(value)}(?!\w)", text) is not None


def _number_forms(value: str) -> set[str]:
    """A number as a worked example may write it: itself, and a decimal cut or rounded to fewer places (732.25:
    732, 732.2, 732.3), each of those only if it keeps three significant digits: "multiply by 60" does not give
    60.96 away, nor "round to 10" 9.67."""
    decimals = value.partition(".")[2]
    if not decimals.isdigit() or len(value) > 28:  # Decimal's default precision: no one retells such a number
        return {value}
    exact, forms = Decimal(value), set()
    for places in range(len(decimals)):
        step = Decimal(1).scaleb(-places)
        forms |= {str(exact.quantize(step, rounding=r)) for r in (ROUND_DOWN, ROUND_HALF_UP, ROUND_HALF_EVEN)}
    return {value} | {f for f in forms if len(f.replace(".", "").strip("0")) >= 3}


def _numbers_of(text: str, question: Question) -> list[tuple[str, int]]:
    """The question's numbers in the text: each one of two or more digits; single digits only when the text has
    two or more of the question's numbers (a worked example; "multiply by 2" alone is a rule). A number with the
    word its question gives it ("56 passengers") is that question's quantity, and counts twice."""
    shared = sorted(_numbers(text) & _numbers(question.text), key=lambda n: (-len(n), n))
    found = shared if len(shared) >= 2 else [n for n in shared if len(n) > 1]
    quantities = _quantities(text) & _quantities(question.text)
    units = {n: unit for n, unit in sorted(quantities)}
    return [(f"{n} {units[n]}", 2) if n in units else (n, 1) for n in found]


def _quantities(text: str) -> set[tuple[str, str]]:
    """(number, the word after it): "56 passengers" -> ("56", "passengers")."""
    return {(n.replace(",", ""), w.lower()) for n, w in re.findall(r"(\d+(?:[.,]\d+)*)\s+([A-Za-z]{3,})", text)}


def _names_of(text: str, question: Question, by_verb_form: bool = False) -> list[tuple[str, int]]:
    """(what, how many particulars) for each capitalised word of the question that is not just a sentence start
    (Mary, Seattle), found in the text anywhere but where the text's own sentence or title starts; a run of them
    ("Nobel Prize") is one name. A name that acts in its question ("Priya has", "Tom must") is a person of its
    story, and counts twice; with `by_verb_form`, also one followed in its question by any verb-like word, or in
    the text by a listed one ("the distance James runs")."""
    entry = words().get("en", {})
    starters = entry.get("sentence_starters", set())
    names = set(_CAPITALISED.findall(question.text)) - starters
    # in the text only before a listed verb: "Nobel Prize laureates" has a verb's form
    acting = (
        _acting(question.text, entry, by_verb_form) | (_acting(text, entry, False) if by_verb_form else set())
    ) & names
    starts = {m.start(1) for m in re.finditer(r"(?:^|[.:!?]\s+)([A-Z])", text)}
    found = []
    for run in _NAME_RUN.finditer(text):
        run_words = run.group(0).split()
        if run.start() in starts:  # "When Joan": the text's own first word is no part of a name
            run_words = run_words[1:]
        while run_words and run_words[0] in starters:
            run_words = run_words[1:]
        if any(w in names for w in run_words):
            found.append(" ".join(run_words))
    return [(f"{name} (a person of it)", 2) if set(name.split()) & acting else (name, 1) for name in sorted(set(found))]


# A word that reads as a verb of the name before it: "fills", "decides", "watched" (not "glass", "bonus", "this";
# "has" is listed).
_VERB_FORM = re.compile(r"[a-z]{2,}(?:[^isu]s|ed)")


def _acting(text: str, entry: dict, by_verb_form: bool) -> set[str]:
    """Capitalised words followed by a listed person verb ("Priya has"), or with `by_verb_form` any verb form."""
    listed = entry.get("person_verbs", set())
    return {
        m.group(1)
        for m in re.finditer(r"\b([A-Z][a-z]+)\s+([a-z]+)", text)
        if m.group(2) in listed or (by_verb_form and _VERB_FORM.fullmatch(m.group(2)))
    }


def _repeats(text: str, other: str, config: ScreeningConfig) -> str | None:
    if similarity(text, other) >= config.near_duplicate:
        return f"near-duplicate of {EXISTING}"
    (condition, strategy), (other_condition, other_strategy) = split(text), split(other)
    if condition and _tokens(condition) == _tokens(other_condition):
        if similarity(strategy, other_strategy) >= config.same_condition_overlap:
            return f"the same condition and much the same strategy as {EXISTING}: update that one instead"
    ours, theirs = _doing_words(strategy), _doing_words(other_strategy)
    if ours and theirs and SequenceMatcher(None, ours, theirs).ratio() >= config.near_duplicate:
        return f"the same strategy as {EXISTING}: update that one (widen its condition) instead"
    return None


def split(text: str) -> tuple[str, str]:
    """(condition, strategy): "When <condition>, <strategy>.", "<title>: <strategy>", "<条件>，<做法>"; a text of
    another form is all strategy."""
    match = _SPLIT.match(text)
    return (text[: match.end()], text[match.end() :]) if match else ("", text)


# The frame a strategy is said in ("the strategy is to", "you should", "it is important to"): not what it says.
_STRATEGY_FRAME = set(
    "the a an is are be to it its it's s this that strategy should must can could need needs you we they agent "
    "assistant important always then and".split()
)


def _doing_words(strategy: str) -> list[str]:
    return [w for w in _tokens(strategy) if w not in _STRATEGY_FRAME]


def similarity(a: str, b: str) -> float:
    return SequenceMatcher(None, _tokens(a), _tokens(b)).ratio()
