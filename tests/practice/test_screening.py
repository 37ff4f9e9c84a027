"""The library's screening: a measured classifier. Capable learners' experiences pass, whatever their form,
topic or language; the junk small models proposed is refused, each with its reason."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from utu.config.models import ScreeningConfig
from utu.practice.screening import Question, Source, language, screen, tells_its_story

CORPORA = Path(__file__).parent / "corpora"
WORDS = Path(__file__).parents[2] / "utu" / "practice" / "screening_words.yaml"
QUESTION = "Joan found 70 seashells on the beach. She gave Sam some of her seashells. She has 27 seashells. How many seashells did she give to Sam?"  # noqa: E501
SOURCE = Source([Question(QUESTION, "43")])
DEFAULTS = ScreeningConfig()


def corpus(name: str) -> list[dict]:
    return [json.loads(line) for line in (CORPORA / name).read_text(encoding="utf-8").splitlines() if line.strip()]


def verdict(row: dict, config: ScreeningConfig = DEFAULTS) -> str | None:
    source = Source([Question(row["question"], row.get("answer"))] if row.get("question") else [])
    return screen(row["experience"], source, row.get("library", []), config)


# the default, and the knob that waits for the learning suite to be full before it becomes the default
SETTINGS = [DEFAULTS, ScreeningConfig(persons_by_verb_form=True)]


@pytest.mark.parametrize("config", SETTINGS, ids=["default", "persons_by_verb_form"])
@pytest.mark.parametrize("name", ["good.jsonl", "good_independent.jsonl"])
def test_at_most_5_percent_of_good_experiences_are_refused(name, config):
    rows = corpus(name)
    refused = [(row["experience"], why) for row in rows if (why := verdict(row, config))]
    assert len(rows) >= 60
    assert len(refused) <= 0.05 * len(rows), refused


@pytest.mark.parametrize("config", SETTINGS, ids=["default", "persons_by_verb_form"])
def test_at_least_90_percent_of_the_junk_small_models_wrote_is_refused(config):
    rows = corpus("junk.jsonl")
    kept = [row["experience"] for row in rows if not verdict(row, config)]
    assert len(rows) >= 25
    assert len(kept) <= 0.10 * len(rows), kept


def test_the_good_corpora_hold_what_capable_learners_write():
    rows = corpus("good.jsonl") + corpus("good_independent.jsonl")
    chinese = [r for r in rows if language(r["experience"]) == "zh"]
    titled = [r for r in rows if ": " in r["experience"][:60] and not r["experience"].startswith("When")]
    assert len(chinese) >= 20 and len(titled) >= 40


@pytest.mark.parametrize(
    ("text", "question"),
    [  # the examples: general, topical advice with a plausible source question
        (
            "When a problem involves a regular hexagon, split it into six equilateral triangles to find lengths and "
            "areas.",
            "A regular hexagon can be divided into six equilateral triangles. What is its perimeter?",
        ),
        (
            "When asked for a remainder modulo 1000, reduce every intermediate product modulo 8 and 125 separately "
            "and combine them with the Chinese remainder theorem.",
            "Find the remainder when 9 x 99 x 999 is divided by 1000.",
        ),
        (
            "Geometry verification: Systematically verify all constraints (position, distances, angles, area) early "
            "using multiple independent methods.",
            "Find the area of the triangle with vertices on the circle.",
        ),
        ("当题目涉及正六边形时，先把它分成六个等边三角形，再计算边长和面积。", "一个正六边形可以分成六个等边三角形。"),
        ("Lorsque le problème mélange des unités, convertissez tout dans la même unité.", "Un fil de 4 pieds ..."),
        ("検索結果が矛盾する場合は、公式サイトで確認してください。", ""),  # Japanese: no word list, not Chinese
        ("機率題：列舉所有等可能結果後計數。", ""),  # traditional Chinese
        # math, code and abbreviations are not template fragments or sentence ends
        ("Integration by parts: choose u as the polynomial, e.g. $\\int x e^{x}dx = (x-1)e^{x} + C$.", ""),
        ("When the answer is a fraction, box it as \\boxed{\\frac{1}{2}} rather than a decimal.", ""),
        ("When a set is listed as $\\{1, 2, 3\\}$, count its elements before summing.", ""),
        ("SQL changes: use an UPDATE with a WHERE clause and never run DELETE without one.", ""),
        ("Web pages: read the <title> tag and the first <h1> before scrolling.", ""),
        ("Use the U.S. Census Bureau's latest release. Check its reference year.", ""),
        ("It is crucial to draw the sets as nested circles before counting overlaps.", ""),
    ],
)
def test_topical_advice_in_any_form_and_language_passes(text, question):
    assert screen(text, Source([Question(question)]), []) is None


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('The operation to add the new experience is: ""}}, {', "JSON or template fragment"),
        ('When adding, use "content": "the sum".', "JSON or template fragment"),
        ("When <condition>, <strategy>.", "JSON or template fragment"),
        ("When adding, refine [G3] with a check.", "JSON or template fragment"),
        ("When adding numbers, carry the tens.\\nWhen subtracting, borrow.", "JSON or template fragment ('\\\\n')"),
        ("When Joan found 70 seashells on the beach, she gave some to Sam.", "copies its question"),
        ("When the answer is needed, box 43 right away.", "gives its question's answer ('43')"),
        ("When 70 shells become 27, subtract to get the number given away.", "names 2 particulars (27, 70)"),
        (
            "When Joan gives shells to Sam, subtract what she has left.",
            "names 3 particulars (Joan (a person of it), Sam)",
        ),
        ("When the 70 seashells are counted, subtract the rest.", "names 2 particulars (70 seashells)"),
        ("When adding, add. When subtracting, subtract. When dividing, divide.", "3 sentences"),
        ("When x, do y.", "characters long"),
        ("When you need to add two numbers, use the formula for the sum of two numbers (e.", "parenthesis left open"),
        ("When the order of operations is not followed correctly, the result is incorrect.", "states a fact"),
        ("这道题里她一共送出了四十三个贝壳。", "states a fact"),
        (
            "When seashells are given away, subtract the seashells left from the seashells found.",
            "retells its question",
        ),
        ("When the verifier reads a whole number, give the decimal instead.", "only the learner saw ('the verifier')"),
        ("When the note says extracted 11 and gold 11.33, round to two places.", "only the learner saw"),
        ("When Attempt 2 lost, avoid what it did.", "only the learner saw ('Attempt 2')"),
    ],
)
def test_junk_is_refused_with_a_reason(text, reason):
    assert reason.replace("particulars (", "particulars of its question (") in (screen(text, SOURCE, []) or "")


def test_the_object_counted_is_retold_within_one_clause_not_across_title_and_strategy():
    """The 1.5B's right rule in a demo (3f6df62), restated and still refused while the object was counted over the
    whole text: a title that names the topic and a strategy that names it once more is topical advice. The price:
    a trivial rule that names its object once in each passes too, for the validation gate to judge."""
    question = Source(
        [Question("Diego pours 5 litres of juice into cups of 500 millilitres each. How many cups does Diego fill?")]
    )
    right = (
        "Dividing a given amount of juice into cups of a specific size: first convert the volume of juice from litres "
        "to milliliters, and then divide the total volume by the volume of each cup to find the number of cups."
    )
    assert screen(right, question, []) is None
    # a trivial rule told so passes too: the validation gate judges it
    assert screen("When the number of seashells is given, subtract the seashells left.", SOURCE, []) is None
    retold = "Juice into cups: the number of cups is the number of cups Diego fills."
    assert "says 'cups' 2 times in its strategy" in (screen(retold, question, []) or "")
    assert "says 'cups' 2 times," in (screen("Count the cups, then the cups left.", question, []) or "")  # no condition


def test_a_decimal_answer_is_given_away_rounded_too():
    """Seen in a 1.5B learner's proposal (tool selection, 2026-11-26): its question's answer, 732.25, cut short."""
    question = Source([Question("Convert 455 miles to kilometres, rounded to 2 decimals.", "732.25")])
    for given in ("732", "732.3", "732.2"):  # cut, rounded half up, rounded half to even
        refused = screen(f"When converting miles, the agent should give the correct answer {given}.", question, [])
        assert refused is not None and "gives its question's answer ('732.25')" in refused
    # a rounded form with fewer than three significant digits is a common constant, not the answer
    minutes = Source([Question("How many kilometres is 37.88 miles?", "60.96")])
    assert (
        screen("When a conversion involves time, call the tool once; do not multiply by 60 yourself.", minutes, [])
        is None
    )
    thirds = Source([Question("Share 29 dollars among 3.", "9.67")])
    assert screen("When a share is not whole, round to two decimal places, not to 10.", thirds, []) is None


def test_one_particular_of_its_question_is_allowed_two_are_not():
    question = Source([Question("A candle melts 2 cm every hour. How much shorter is it after 4 hours?", "8")])
    worked = "When the melting rate is 2 cm/hour and the time range is 4 hours, multiply them to get the length."
    assert "particulars of its question (2, 4 hours)" in screen(worked, question, [])
    assert screen("When a rate is given per hour, multiply it by the hours.", question, []) is None
    assert screen("When a quantity halves, divide it by 2.", question, []) is None  # one digit: a rule
    names = Source([Question("On Wikipedia, what did the Nobel Prize article say in 2019?")])
    assert screen("When a question asks about a Nobel Prize, read the laureate page itself.", names, []) is None


def test_a_person_is_told_by_any_verb_after_their_name_with_the_knob_on():
    """Two rules the embedded learner wrote that name their question's person once, let through while only a listed
    verb made a name a person: kept by the learning suite's GSM8K fewer_refusals run, and written in a demo."""
    cases = [
        (
            "James decides to run 3 sprints 3 times a week.  He runs 60 meters each sprint.  How many total meters "
            "does he run a week?",
            "When the problem is about calculating the total distance James runs in a week, the strategy is to "
            "multiply the distance run in one sprint by the number of sprints he runs in a week.",
        ),
        (
            "Ravi pours 8 litres of juice into cups of 500 millilitres each. How many cups does Ravi fill?",
            "When the problem asks for the number of cups Ravi fills, we need to convert the total volume of juice "
            "from litres to millilitres and then divide by the capacity of one cup.",
        ),
    ]
    on = ScreeningConfig(persons_by_verb_form=True)
    for question, rule in cases:
        source = Source([Question(question)])
        assert screen(rule, source, []) is None  # the default, as the suite runs
        assert "(a person of it)" in (screen(rule, source, [], on) or "")
        assert tells_its_story(rule, source, on)  # sent back to be restated without the name
    # plural nouns after a name in the experience are no verbs ("laureates"); in the question they would be
    prize = Source([Question("Who was the first woman to win an unshared Nobel Prize in Chemistry?")])
    assert screen("When a question asks about Nobel Prize laureates, read the laureate page.", prize, [], on) is None


def test_a_proposal_must_not_give_its_own_questions_answer(tmp_path):
    """In a step, the answer a proposal must not give is that of the questions it was learned from: a rule that
    names "10 seats" is not refused because another question's answer is 10."""
    from utu.config.models import ScreeningConfig as Config
    from utu.practice.outcomes import Refusal
    from utu.practice.step import screen_against, step_questions

    rows = [
        type("Row", (), {"dataset_index": i, "raw_question": q, "correct_answer": a})()
        for i, (q, a) in enumerate(
            [
                ("41 guests, tables of 5: how many tables?", "9"),
                ("95 dollars, 9 dollars a ticket: how many tickets?", "10"),
            ]
        )
    ]
    check, _ = screen_against(step_questions(rows), Config(), answers_shown=True)
    rule = "When dividing people among tables of 5 or 10 seats, round up to seat everyone."
    assert check(rule, [0], []) is None
    refused = check(rule, [1], [])
    assert refused.kind == Refusal.ANSWER_IN_TEXT and "answer ('10')" in refused.detail
    assert "answer ('10')" in check(rule, [], []).detail  # no record of its sources: every question counts


def test_repeats_of_the_library_are_refused():
    existing = "When a problem asks how many are left, subtract the part taken away from the total."
    again = "When a problem asks how many are left, subtract the part that was taken away from the total."
    assert screen(again, SOURCE, [existing]).startswith("near-duplicate")
    same_condition = "When the problem involves adding two numbers, always add them together step by step."
    reworded = "When the problem involves adding two numbers, the strategy is to add them together."
    assert screen(reworded, SOURCE, [same_condition]).startswith("the same condition and much the same strategy")
    other_strategy = "When the problem involves adding two numbers, check the sum by subtracting one of them."
    assert screen(other_strategy, SOURCE, [same_condition]) is None
    titled = "Unit mixing: Convert every length to one unit before dividing."
    assert screen("Unit mixing: Convert every length to one unit before you divide.", SOURCE, [titled])
    assert screen("单位换算：先把所有长度换算成同一单位。", SOURCE, ["单位换算：先把所有长度换算成同一单位再计算。"])


def test_every_threshold_is_a_knob_and_screening_can_be_switched_off():
    fact = "When the order of operations is not followed correctly, the result is incorrect."
    assert screen(fact, SOURCE, [], ScreeningConfig(require_directive=False)) is None
    two = "When Joan gives shells to Sam, subtract what she has left."  # Joan acts in its question: 2, Sam 1
    assert screen(two, SOURCE, [], ScreeningConfig(max_particulars=3)) is None
    long = "When adding, " + "check the sum again and " * 30 + "box it."
    assert screen(long, SOURCE, []) and screen(long, SOURCE, [], ScreeningConfig(max_chars=1000)) is None
    off = ScreeningConfig(enabled=False)
    assert screen('The operation is: ""}}, {', SOURCE, [], off) is None
    assert screen("Same text.", SOURCE, ["Same text."], off)  # an exact duplicate is still refused


def test_the_screen_command_reports_each_row_and_explains_refusals(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        json.dumps({"question": QUESTION, "answer": "43", "experience": "When Joan found 70 seashells, subtract."})
        + "\n"
        + json.dumps({"question": "", "experience": "Unit checks: Convert every quantity to one unit first."})
        + "\n"
    )
    command = [sys.executable, "-m", "utu.commands.library", "screen", "--file", str(rows)]
    out = subprocess.run([*command, "--json"], capture_output=True, text=True, check=True)
    first, second = map(json.loads, out.stdout.splitlines())
    piped = subprocess.run([*command[:-1], "-", "--json"], input=rows.read_text(), capture_output=True, text=True)
    assert piped.returncode == 0 and piped.stdout == out.stdout  # the rows from standard input
    assert "particulars of its question (70 seashells" in first["refused"]
    assert first["experience"].startswith("When Joan")
    assert second == {"refused": None, "experience": "Unit checks: Convert every quantity to one unit first."}
    assert "1 of 2 refused" in out.stderr
    plain = subprocess.run([*command, "--max_particulars", "5"], capture_output=True, text=True, check=True)
    assert plain.stdout.splitlines()[0].startswith("KEPT: When Joan")
    rows.write_text(json.dumps({"experience": "Convert the units first.\x1b[2J\x1b]0;pwned\x07"}) + "\n")
    shown = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    assert "\x1b" not in shown and "first.\\x1b[2J\\x1b]0;pwned\\x07" in shown  # shown, never obeyed
    rows.write_text(json.dumps({"experience": "Convert the units first.\x9b2J"}) + "\n")  # C1's CSI: JSON leaves it
    as_json = subprocess.run([*command, "--json"], capture_output=True, text=True, check=True).stdout
    assert "\x9b" not in as_json and json.loads(as_json)["experience"] == "Convert the units first.\x9b2J"
    text = "先换算单位，再相除 é 😀."
    rows.write_text(json.dumps({"experience": text}, ensure_ascii=False) + "\n")
    for encoding in ("ascii", "latin-1"):  # a terminal that is not UTF-8: escaped, no UnicodeEncodeError
        env = {**os.environ, "PYTHONIOENCODING": encoding}
        shown = subprocess.run(command, capture_output=True, encoding=encoding, env=env)
        assert shown.returncode == 0 and "\\u5148" in shown.stdout, shown.stderr
        as_json = subprocess.run([*command, "--json"], capture_output=True, encoding=encoding, env=env)
        assert json.loads(as_json.stdout)["experience"] == text, as_json.stdout  # JSON's own escapes


@pytest.mark.parametrize(
    ("content", "flags", "message"),
    [
        ('{"question": "q"}\n', [], "rows.jsonl:1: experience: Field required"),
        ('{"experience": "fine text here"}\nnot json\n', [], "rows.jsonl:2: the line: Invalid JSON"),
        ('{"experience": "fine text here"}\n', ["--max_particulars", "-1"], "--max_particulars: Input should be"),
        ('{"anwser": "7", "experience": "fine text here"}\n', [], "rows.jsonl:1: anwser: Extra inputs"),
        (b'{"experience": "fine text \xff"}\n', [], "rows.jsonl:1: not UTF-8 text (byte 0xff)"),
        ("\n\n", [], "rows.jsonl: no rows"),
        ('{"experience": "x", "experience": "When dividing, convert first."}\n', [], "rows.jsonl:1: key 'experience'"),
    ],
)
def test_the_screen_command_refuses_bad_input_in_one_line(tmp_path, content, flags, message):
    rows = tmp_path / "rows.jsonl"
    rows.write_bytes(content if isinstance(content, bytes) else content.encode())
    command = [sys.executable, "-m", "utu.commands.library", "screen", "--file", str(rows), *flags]
    out = subprocess.run(command, capture_output=True, text=True)
    assert out.returncode != 0 and message in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def test_the_screen_command_reads_no_device_and_no_endless_line(tmp_path):
    """`--file /dev/zero` was read until the memory ran out; a pipe (`--file <(...)`) is read as a file."""
    from utu.db.dataset_io import MAX_LINE_BYTES

    command = [sys.executable, "-m", "utu.commands.library", "screen", "--file"]
    out = subprocess.run([*command, "/dev/zero"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "/dev/zero: not a file or a pipe" in out.stderr, out.stderr
    piped = subprocess.run(
        ["bash", "-c", '"$0" "$@" <(echo \'{"experience": "When dividing, convert first."}\')', *command],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert piped.returncode == 0 and "0 of 1 refused" in piped.stderr, piped.stderr
    for odd in ("9" * 5000, "[" * 3000 + "]" * 3000):  # what json cannot read is pydantic's to say, in one line
        (tmp_path / "odd.jsonl").write_text(f'{{"experience": "e", "answer": {odd}}}\n')
        out = subprocess.run([*command, str(tmp_path / "odd.jsonl")], capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and "odd.jsonl:1:" in out.stderr and "Traceback" not in out.stderr, out.stderr
    long = tmp_path / "long.jsonl"
    long.write_text('{"experience": "' + "x" * MAX_LINE_BYTES + '"}\n')
    out = subprocess.run([*command, str(long)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and f"long.jsonl:1: longer than {MAX_LINE_BYTES} bytes" in out.stderr, out.stderr


def test_only_a_strategy_told_as_its_question_is_sent_back_to_be_restated():
    """tells_its_story: a strategy refused for details of its question around it, which a restatement can drop."""
    for told, why in (
        ("When Joan gives shells to Sam, subtract what she has left.", "particulars"),  # its names
        ("When the answer came out as 43, subtract what is left from what there was.", "answer"),  # in the condition
        ("When the verifier reads a whole number, give the decimal instead.", "learner saw"),  # the learner's view
        ("When dividing, the verifier should convert the amount to the portion's unit first.", "learner saw"),  # actor
        ("Unit conversion: The Verifier must first convert the amount to the portion's unit.", "learner saw"),
        # a worked example that says what to do (the 1.5B's second look in a demo, 699f6dc)
        ("When Joan gave shells away, first count the shells she found (70), then subtract those left (43).", "answer"),
    ):
        assert tells_its_story(told, SOURCE) == screen(told, SOURCE, [])
        assert why in tells_its_story(told, SOURCE), told
    assert tells_its_story("When subtracting, subtract what is left.", SOURCE) is None  # not refused at all
    for final in (
        "When Joan gives shells to Sam, subtract. When Joan counts, add. When done, box.",  # its shape
        "When Joan gives shells to Sam, the shells left are what she keeps.",  # a story stating a fact
        "When the verifier read 43, the root cause was the subtraction.",  # the learner's view, stating a fact
        "When asked how many shells, always answer 43.",  # the strategy is the answer: nothing would be left
        "Seashell problems: the answer is always 43.",
        "When unsure, write what the verifier expects.",  # a strategy about the verifier
        "When unsure, the verifier should accept 43.",  # the verifier as its actor, and the answer
        "When unsure, the verifier should read what the verifier expects.",  # about the verifier all the same
        "When unsure, the verifier should accept any number.",  # the grader's own job: advice about the verifier
        "Unit conversion: the verifier should round the answer up.",
        "When the verifier reads a whole number, answer 43.",  # the answer in the strategy, whatever the condition
        "When asked, box 43 right away and stop.",  # the answer and hardly more
        "Always answer 43.",  # no condition to drop
    ):
        assert screen(final, SOURCE, []), final
        assert tells_its_story(final, SOURCE) is None, final
    told = "When Joan gives shells to Sam, subtract what she has left."
    assert tells_its_story(told, SOURCE, ScreeningConfig(enabled=False)) is None


@pytest.mark.parametrize(
    ("kind", "strategy", "experience"),
    [
        (
            "dividing an amount into pieces",
            "convert the amount to the piece's unit, then divide",
            "Dividing an amount into pieces: convert the amount to the piece's unit, then divide.",
        ),
        ("Unit conversion.", "  convert first.\n", "Unit conversion: convert first."),
        ("单位换算：", "先换算成同一单位，再做除法。", "单位换算: 先换算成同一单位，再做除法。"),
        ("  ", "convert first", ""),
        ("unit conversion", "", ""),
    ],
)
def test_a_restatement_is_kind_colon_strategy_on_one_line(kind, strategy, experience):
    from utu.practice.schemas import Restated

    assert Restated(problem_kind=kind, strategy=strategy).experience == experience


def test_without_the_ground_truth_no_restatement_is_told_the_answer():
    """given_ground_truth: false hides the answers from the learner; a refusal's reason would name one."""
    from utu.practice.step import screen_against

    told = "When the answer came out as 43, subtract what is left from what there was."
    questions = {0: Question(QUESTION, "43")}
    _, shown = screen_against(questions, ScreeningConfig(), answers_shown=True)
    _, hidden = screen_against(questions, ScreeningConfig(), answers_shown=False)
    assert "43" in shown(told, [0])
    assert hidden(told, [0]) is None
    story = "When Joan gives shells to Sam, subtract what she has left."
    assert hidden(story, [0]) == shown(story, [0])


def duplicate_keys(node: yaml.Node) -> list[str]:
    """Keys said twice in one mapping of a composed YAML document: PyYAML keeps the last one silently."""
    if isinstance(node, yaml.MappingNode):
        keys = [key.value for key, _ in node.value]
        found = [f"{key.value} (line {key.start_mark.line + 1})" for key, _ in node.value if keys.count(key.value) > 1]
        return found + [d for _, value in node.value for d in duplicate_keys(value)]
    if isinstance(node, yaml.SequenceNode):
        return [d for item in node.value for d in duplicate_keys(item)]
    return []


def test_the_word_lists_say_each_key_once():
    assert duplicate_keys(yaml.compose(WORDS.read_text(encoding="utf-8"))) == []
    assert duplicate_keys(yaml.compose("en:\n  a: [x]\n  a: [y]\n")) == ["a (line 2)", "a (line 3)"]
