"""The library's screening: the junk small models actually proposed is refused, sensible advice is not."""

import pytest

from utu.practice.screening import Source, screen

QUESTION = "When Joan found 70 seashells on the beach, she gave some of her seashells to Sam. She has 27 seashells. How many seashells did she give to Sam?"  # noqa: E501
SOURCE = Source([QUESTION, "43"])


@pytest.mark.parametrize(
    "text",
    [
        "When a problem says how many were given away, subtract what is left from what there was at first.",
        "When the question asks for a total of several groups, add the amounts of all groups.",
        "When you have the final number, write only that number in \\boxed{}.",
        "When a quantity doubles, multiply it by 2 before comparing.",
        "When the numbers are large, e.g. above 1,000, check each column of the addition.",
    ],
)
def test_general_advice_passes(text):
    assert screen(text, SOURCE, []) is None


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('The operation to add the new experience is: ""}}, {', "not of the form"),  # SmolLM2, make demo
        ('When adding, use the new operation "{name}".', "JSON or template fragment"),
        ("When <condition>, <strategy>.", "JSON or template fragment"),
        ("The number of walnut trees planted today is 33.", "not of the form"),  # Qwen-1.5B
        ("When Joan found 70 seashells on the beach, she gave some to Sam.", "names numbers of its question (70)"),
        ("When she gave some of her seashells to Sam, subtract.", "copies its question"),
        ("When the answer is needed, it is 43.", "names numbers of its question (43)"),
        ("When adding, add. When subtracting, subtract the smaller number.", "more than one sentence"),
        ("When x, do y.", "characters long"),
        ("When adding the numbers, use ADD for the library.", "JSON or template fragment"),
        ("When a girl gives shells to Sam, subtract what she has left.", "names 'Sam' from its question"),  # demo
        ("When you need to add two numbers, use the formula for the sum of two numbers (e.", "parenthesis left open"),
    ],
)
def test_junk_is_refused_with_a_reason(text, reason):
    assert reason in (screen(text, SOURCE, []) or "")


def test_a_near_duplicate_of_an_existing_experience_is_refused():
    existing = "When a problem asks how many are left, subtract the part taken away from the total."
    again = "When a problem asks how many are left, subtract the part that was taken away from the total."
    assert "near-duplicate" in screen(again, SOURCE, [existing])
    other = "When the question asks for a total of several groups, add the amounts of all groups."
    assert screen(other, SOURCE, [existing]) is None


def test_several_single_digit_numbers_of_the_question_make_a_worked_example():
    question = Source(["A candle melts 2 cm every hour. How much shorter is it after 4 hours?", "8"])
    worked = "When the melting rate is 2 cm/hour and the time range is 4 hours, the total length of the flame is 8 cm."
    assert screen(worked, question, []).startswith("names numbers of its question (2, 4")
    assert screen("When a rate is given per hour, multiply it by the hours.", question, []) is None
    assert screen("When a quantity halves, divide it by 2.", question, []) is None  # one digit: a rule


def test_a_question_objects_make_advice_about_that_question():
    """From `make demo` (2026-11-24, the 1.5B learner): both were applied before this rule."""
    balloons = Source(["Fred has 5 yellow balloons. Sam has 6 yellow balloons. How many balloons in total?", "11"])
    junk = "When the problem asks for the total number of yellow balloons, add the number of balloons each person has."
    assert screen(junk, balloons, []).startswith("names 'yellow balloons' from its question")
    trees = Source(["There are 33 walnut trees in the park. Park workers will plant 44 more walnut trees today."])
    junk = "When the park workers are planting walnut trees, add the trees in the park to the trees planted."
    assert screen(junk, trees, []).startswith("names 'park workers' from its question")
    # the strategy language side by side is not an object, even when the question has it too
    advice = "When the problem asks for the total number of items, add the amounts of all groups."
    assert screen(advice, Source(["What is the total number of items?"]), []) is None


def test_much_the_same_strategy_under_an_existing_condition_is_refused():
    existing = "When the problem involves adding two numbers, always add them together step by step."
    again = "When the problem involves adding two numbers, the strategy is to add them together."  # make demo
    assert screen(again, SOURCE, [existing]).startswith("the same condition and much the same strategy")
    # another strategy under the same condition is new knowledge; another condition is another rule
    another = "When the problem involves adding two numbers, check the sum by subtracting one of them."
    assert screen(another, SOURCE, [existing]) is None
    other = "When the problem involves subtracting, take the smaller from the larger."
    assert screen(other, SOURCE, [existing]) is None


def test_counting_a_question_objects_makes_advice_about_that_question():
    """From `make demo` (2026-11-25) and learning_gain run 7: each was applied before this rule."""
    puppies = Source(["Sandy had 8 puppies. She gave 4 to her friends. How many puppies does she have now?", "4"])
    junk = (
        "When the initial number of puppies is known, the final number of puppies can be subtracted from the "
        "initial number to find the initial number of puppies."
    )
    assert screen(junk, puppies, []).startswith("names 'puppies' from its question")
    bridge = Source(["A bridge can hold 5000 pounds. How many boxes of 15 pounds can a truck of 3755 pounds carry?"])
    junk = (
        "When the problem is about the weight capacity of a bridge and the weight of boxes, the strategy is to set "
        "up an equation based on the given information and solve for the number of boxes."
    )
    assert screen(junk, bridge, []).startswith("names 'boxes' from its question")
    # said once, or twice but not in its question, the word is the advice's own
    assert screen("When puppies are given away, subtract them from how many there were.", puppies, []) is None
    assert screen("When weights are given in pounds, keep every weight in pounds.", bridge, []) is None  # units


def test_the_same_strategy_under_another_condition_is_refused():
    """From `make demo` (2026-11-25): three of seven experiences said "add the numbers together"."""
    existing = "When the assistant adds the numbers together, the strategy is to add the numbers together."
    again = "When the problem involves addition, the strategy is to add the two numbers together."
    assert screen(again, SOURCE, [existing]).startswith("the same strategy as an existing experience")
    # a different action, or the same action on other things, is other advice
    kept = [
        "When the problem involves a difference, the strategy is to subtract the numbers.",
        "When a problem is a simple addition, add the numbers together and report the final number.",
    ]
    for text in kept:
        assert screen(text, SOURCE, [existing]) is None, text
    feet = "When a problem mixes feet and inches, convert everything to inches."
    assert screen("When a problem mixes hours and minutes, convert everything to minutes.", SOURCE, [feet]) is None
