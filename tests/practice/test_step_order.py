"""docs/architecture.md's stage table is the step as the code has it: each function is where the table says, and
the step calls them in the table's order."""

import ast
import itertools
import re

from tests.conftest import ROOT

DOC = ROOT / "docs" / "architecture.md"


def stage_table() -> list[tuple[str, str, str]]:
    section = DOC.read_text().split("## One practice step, end to end", 1)[1]
    rows = re.findall(r"^\| ([a-z ]+) \| `([\w.]+)` \| `([\w/.]+)` \| (.+) \|$", section, re.MULTILINE)
    assert rows, "no stage table in docs/architecture.md"
    return [(stage, function, path) for stage, function, path, _ in rows]


def stage_spans() -> dict[str, list[str]]:
    section = DOC.read_text().split("## One practice step, end to end", 1)[1]
    rows = re.findall(r"^\| ([a-z ]+) \| `[\w.]+` \| `[\w/.]+` \| (.+) \|$", section, re.MULTILINE)
    return {stage: re.findall(r"`([\w.]+)`", spans) for stage, spans in rows}


def defined(path: str, name: str) -> ast.AST | None:
    tree = ast.parse((ROOT / path).read_text())
    owner, _, function = name.rpartition(".")
    scope = tree.body
    if owner:
        classes = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == owner]
        if not classes:
            return None
        scope = classes[0].body
    found = [n for n in scope if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == function]
    return found[0] if found else None


def source(path: str, name: str) -> str:
    node = defined(path, name)
    assert node is not None, f"{name} not in {path}"
    return ast.get_source_segment((ROOT / path).read_text(), node) or ""


def in_order(text: str, *calls: str) -> bool:
    places = [text.find(c) for c in calls]
    return -1 not in places and places == sorted(places)


def test_every_stage_of_the_table_is_a_function_where_the_table_says():
    for stage, function, path in stage_table():
        assert defined(path, function) is not None, f"{stage}: {function} is not in {path}"


def test_the_stages_are_the_paper_s_in_order_and_the_loop_s_docstring_names_them_so():
    stages = [stage for stage, _, _ in stage_table()]
    assert stages == [
        *("rollouts", "judge", "summarise", "group advantage", "proposals"),
        *("consolidate", "restate", "screen", "gate", "save"),
    ]
    docstring = ast.get_docstring(ast.parse((ROOT / "utu/practice/loop.py").read_text())) or ""
    assert in_order(docstring, *(f"{s} ->" for s in stages[:-1]))


def test_the_table_s_span_names_are_the_code_s():
    code = "\n".join(p.read_text() for p in (ROOT / "utu").rglob("*.py"))
    for stage, names in stage_spans().items():
        for name in names:  # a span, a usage tag, or a learner stage whose tag is "learner.<stage>"
            literal = f'"{name}"' in code or f'"{name.removeprefix("learner.")}")' in code
            assert literal, f"{stage}: no span or tag {name!r} in utu/"


def test_the_code_calls_the_stages_in_the_table_s_order():
    loop, rollouts, learner = "utu/practice/loop.py", "utu/practice/rollouts.py", "utu/practice/experience_updater.py"
    assert in_order(source(loop, "PracticeLoop.practice_step"), "self.rollouts.groups(", "self.update(", "save_step(")
    assert in_order(source(loop, "PracticeLoop.update"), "self.propose(", "self.gate.decide(")
    assert in_order(source(loop, "PracticeLoop.propose"), ".consolidate(", ".restate(", "apply_operations(")
    assert in_order(source(rollouts, "Rollouts.groups"), "run_attempt,", "self.updater.learn(")
    assert in_order(source("utu/eval/attempt.py", "run_attempt"), "await rollout(", "await verifier(row)")
    assert in_order(source(learner, "ExperienceUpdater.learn"), "self.summarise(", "self.advantage(", "self.proposals(")


LOOP, STEP_FILE = "utu/practice/loop.py", "utu/practice/step.py"
GROUPS = [(LOOP, "PracticeLoop.practice_step"), ("utu/practice/rollouts.py", "Rollouts.groups")]
LEARN = [*GROUPS, ("utu/practice/experience_updater.py", "ExperienceUpdater.learn")]
UPDATE = [(LOOP, "PracticeLoop.practice_step"), (LOOP, "PracticeLoop.update")]
PROPOSE = [*UPDATE, (LOOP, "PracticeLoop.propose")]
# How a reader gets from the step to each stage: each function calls (or hands on) the next.
PATHS = {
    "rollouts": [*GROUPS, ("utu/eval/attempt.py", "run_attempt")],
    "judge": [*GROUPS, ("utu/eval/attempt.py", "run_attempt")],
    "summarise": LEARN,
    "group advantage": LEARN,
    "proposals": LEARN,
    "consolidate": PROPOSE,
    "restate": PROPOSE,
    "screen": PROPOSE,
    "gate": UPDATE,
    "save": UPDATE[:1],
}


def called(path: str, name: str) -> set[str]:
    """The functions `name` calls, or hands to `partial`, by their last name."""
    node = defined(path, name)
    assert node is not None, f"{name} not in {path}"
    calls = [n for n in ast.walk(node) if isinstance(n, ast.Call)]
    handed = [a for c in calls if isinstance(c.func, ast.Name) and c.func.id == "partial" for a in c.args[:1]]
    targets = [c.func for c in calls] + handed
    names = {t.id for t in targets if isinstance(t, ast.Name)}
    return names | {t.attr for t in targets if isinstance(t, ast.Attribute)}


def test_no_stage_is_more_than_three_calls_below_the_step():
    for stage, function, path in stage_table():
        hops = [*PATHS[stage], (path, function)]
        assert len(hops) - 1 <= 3, f"{stage} is {len(hops) - 1} calls below practice_step"
        for (caller_path, caller), (_, callee) in itertools.pairwise(hops):
            called_as = "verifier" if callee == "Verifier.__call__" else callee.rpartition(".")[2]
            assert called_as in called(caller_path, caller), f"{stage}: {caller} does not call {callee}"


def test_the_path_check_fails_on_a_function_that_does_not_call_the_next():
    learner = "utu/practice/experience_updater.py"
    assert "advantage" not in called(learner, "ExperienceUpdater.summarise")
    assert "advantage" not in called(learner, "ExperienceUpdater.advantage")  # its variable of that name is no call


def test_loop_py_stays_a_loop_you_can_read():
    assert len((ROOT / "utu/practice/loop.py").read_text().splitlines()) < 300
