"""Does the restate stage keep a refused proposal's strategy? The embedded learner restates each case N times.

    python benchmarks/learning/restate.py [--learner qwen2.5-coder-1.5b] [--n 5] [--kind KIND ...] [--name SUFFIX]

Practice sends back to the learner a proposal the screening refused only for its question's story
(utu.practice.screening.tells_its_story). The cases are proposals the 1.5B wrote in `make demo` on Portions: a
strategy told as its question, one told with the verifier as its actor, a worked example that states the right
answer (the screening keeps it final: it is here for comparison; `sent_back` says what practice itself would send
back), and one that says what to do beside its numbers and answer (sent back). A restatement keeps the strategy when
it passes the screening again and says the key word: a Portions rule that does not say to convert is the trivial
"divide the total by the portion". One proposal per kind, at the learner's temperature (0.3): a few samples of each,
not a measure of every proposal. Writes benchmarks/results/restate_<learner>.json (restate_<learner>_<name>.json
with `--name`). By hand only (about 10 minutes on 2 cores for the defaults).
"""

import argparse
import asyncio
import os
import sys
from contextlib import AsyncExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import result_name, write_result  # noqa: E402

# (kind, question, answer, the proposal, the word a restatement must keep)
CASES = [
    (
        "told as its question",
        "Ravi has 3 kilograms of flour and fills bags with 250 grams each. How many bags does Ravi fill?",
        "12",
        "When the problem is to determine how many bags Ravi fills, the key is to convert the total weight of flour "
        "from kilograms to grams and then divide by the size of each bag.",
        "convert",
    ),
    (
        "the verifier as its actor",
        "Ravi has 6 litres of juice and fills cups with 200 millilitres each. How many cups does Ravi fill?",
        "30",
        "When the problem asks for the number of cups, the verifier should convert the total amount of juice from "
        "litres to millilitres before dividing by the size of each cup.",
        "convert",
    ),
    (
        "a worked example with the right answer",
        "Priya has 8 kilograms of flour and fills bags with 500 grams each. How many bags does Priya fill?",
        "16",
        "When the total amount of flour is 8 kilograms and each bag contains 500 grams, the number of bags that can "
        "be filled is 16.",
        "convert",
    ),
    (
        "a worked example that says what to do",  # the 1.5B's second look in the 699f6dc demo, sent back since
        "Maria pours 2 litres of juice into cups of 100 millilitres each. How many cups does Maria fill?",
        "20",
        "When the question states 'Maria pours 2 litres of juice into cups of 100 millilitres each', the strategy is "
        "to first convert the total volume of juice from liters to milliliters (2000 milliliters), and then divide "
        "this volume by the volume of one cup (100 milliliters) to find the number of cups Maria fills (20).",
        "convert",
    ),
]


async def restate_all(learner: str, n: int, kinds: list[str] | None) -> list[dict]:
    from utu.practice.library import Operation, ProposedOp
    from utu.practice.parts import open_practice
    from utu.practice.screening import Question, Source, screen, tells_its_story
    from utu.practice.training_free_grpo import load_practice_config

    os.environ["UTU_LEARNER_LOCAL_MODEL"] = learner
    config = load_practice_config("local_portions")
    rows = []
    async with AsyncExitStack() as stack:
        updater = (await open_practice(stack, config)).updater
        for kind, text, answer, proposal, key in CASES:
            if kinds and kind not in kinds:
                continue
            question = Question(text, answer)
            source = Source([question])
            reason = screen(proposal, source, [])
            sent_back = tells_its_story(proposal, source) is not None  # what practice itself would do
            for _ in range(n):
                failures = []
                restated = await updater.restate(
                    [ProposedOp(Operation(operation="ADD", content=proposal), [0])],
                    lambda _text, _sources, why=reason: why,  # restate whatever the screening says, final or not
                    {0: question},
                    failures,
                )
                out = restated[0].op.content or ""
                again = screen(out, source, []) if out != proposal else "not restated"
                rows.append(
                    {
                        "kind": kind,
                        "restated": out if out != proposal else None,
                        "sent_back": sent_back,
                        "refused_again": again,
                        "keeps_strategy": again is None and key in out.lower(),
                        "failures": [f.error for f in failures],
                    }
                )
                print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--learner", default="qwen2.5-coder-1.5b")
    parser.add_argument("--n", type=int, default=5, help="restatements per case")
    parser.add_argument("--kind", action="append", choices=[c[0] for c in CASES], help="only these cases")
    parser.add_argument("--name", type=result_name, help="a suffix for the result file: letters, digits, _, - and .")
    args = parser.parse_args()
    rows = asyncio.run(restate_all(args.learner, args.n, args.kind))
    by_kind = {
        kind: {
            "sent_back_by_practice": all(r["sent_back"] for r in rows if r["kind"] == kind),
            "restated": sum(r["restated"] is not None for r in rows if r["kind"] == kind),
            "passes_screening": sum(r["refused_again"] is None for r in rows if r["kind"] == kind),
            "keeps_strategy": sum(r["keeps_strategy"] for r in rows if r["kind"] == kind),
            "of": sum(r["kind"] == kind for r in rows),
        }
        for kind, *_ in CASES
        if not args.kind or kind in args.kind
    }
    name = f"restate_{args.learner.replace('.', '').replace('-', '_')}" + (f"_{args.name}" if args.name else "")
    write_result(name, {"learner": args.learner, "n": args.n, "by_kind": by_kind, "rows": rows})


if __name__ == "__main__":
    main()
