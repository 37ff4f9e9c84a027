"""GEPA (the `gepa` package, arXiv 2507.19457) optimising the agent's system prompt: the suite's comparison.

The task model is the suite's agent on the embedded llama-server, called with the agent's own messages (its
instructions as the system prompt, the question as the user message) and sampling settings; each reply is
scored by our math verifier, whose note (and the gold answer, which practice's learner also sees) is GEPA's
feedback. The reflection model is the suite's learner with the learner's settings. Every agent call is a GEPA
metric call, so `max_metric_calls` is the agent-call budget. `gepa` is a benchmark dependency
(`pip install -e '.[bench]'`, gepa 0.1.4), not a runtime one.
"""

import asyncio
import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # gepa is imported where it is used: the grading is tested where the bench extra is not installed
    from gepa import EvaluationBatch

PARALLEL = 8  # the embedded llama-server's slots


class _Models:
    """The agent and the learner on the embedded servers, as the suite runs them (UTU_LOCAL_MODEL and
    UTU_LEARNER_LOCAL_MODEL), with their configs' sampling settings. What they spend is kept in `spend` after
    every call: GEPA resumes from its run folder, and a run over several sittings is counted whole."""

    def __init__(self, spend: Path) -> None:
        import openai

        from utu.config import load_agent_config
        from utu.llm import local

        agent = load_agent_config("practice/local_math_agent").model.model_settings
        self.agent_settings = {"temperature": agent.temperature, "top_p": agent.top_p, "max_tokens": agent.max_tokens}
        # configs/practice/local_portions.yaml's learner (top_p was llama-server's default, the same 0.95, until
        # it was written here)
        self.learner_settings = {"temperature": 0.3, "top_p": 0.95, "max_tokens": 512}
        agent_url = local.ensure_running(os.environ["UTU_LOCAL_MODEL"])
        learner_url = local.ensure_running(os.environ["UTU_LEARNER_LOCAL_MODEL"])
        self.agent = openai.OpenAI(base_url=agent_url, api_key="local", max_retries=3, timeout=300)
        self.learner = openai.OpenAI(base_url=learner_url, api_key="local", max_retries=3, timeout=300)
        self.spend, self._lock = spend, threading.Lock()  # the agent is called from GEPA's evaluation threads
        earlier = json.loads(spend.read_text()) if spend.exists() else {}
        self.agent_calls, self.reflection_calls = earlier.get("agent_calls", 0), earlier.get("learner_calls", 0)
        self.agent_tokens, self.reflection_tokens = earlier.get("agent_tokens", 0), earlier.get("learner_tokens", 0)
        self.reflections: list[dict] = earlier.get("reflections", [])  # what the reflection model answered

    def spent(self) -> dict[str, Any]:
        return {
            "agent_calls": self.agent_calls,
            "agent_tokens": self.agent_tokens,
            "learner_calls": self.reflection_calls,
            "learner_tokens": self.reflection_tokens,
            "reflections": self.reflections,
        }

    def _keep(self) -> None:
        _write_whole(self.spend, self.spent())

    def answer(self, system: str, question: str) -> str:
        reply = self.agent.chat.completions.create(
            model="local",
            messages=[{"role": "system", "content": system}, {"role": "user", "content": question}],
            **self.agent_settings,
        )
        with self._lock:
            self.agent_calls += 1
            self.agent_tokens += reply.usage.total_tokens if reply.usage else 0
            self._keep()
        return reply.choices[0].message.content or ""

    def reflect(self, prompt: str | list[dict[str, Any]]) -> str:
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        reply = self.learner.chat.completions.create(model="local", messages=messages, **self.learner_settings)
        text = reply.choices[0].message.content or ""
        prompt_tokens = reply.usage.prompt_tokens if reply.usage else None
        with self._lock:
            self.reflection_calls += 1
            self.reflection_tokens += reply.usage.total_tokens if reply.usage else 0
            self.reflections.append({"prompt_tokens": prompt_tokens, "reply": text})
            self._keep()
        return text


async def grade_all(golds: list[str], replies: list[str], timeout: float) -> list[tuple[bool, str]]:
    """(right, the verifier's note) for each reply: the math verifier's own grading in its worker processes, with
    the held-out evaluation's timeout and score (0), so a reply that makes sympy hang cannot stall GEPA."""
    from utu.verify import workers
    from utu.verify.math import _grade

    async def one(gold: str, reply: str) -> tuple[bool, str]:
        try:
            ok, note, _ = await workers.run(_grade, gold, reply, timeout=timeout)
        except workers.WorkerTimeout:
            return False, f"verification timed out after {timeout:g}s"
        return ok, note

    return await asyncio.gather(*(one(g, r) for g, r in zip(golds, replies, strict=True)))


class AgentAdapter:
    """GEPA's adapter for one component, `system_prompt`: rollouts on the agent, rewards from our verifier."""

    def __init__(self, models: _Models) -> None:
        from suite import EVAL_CONFIG

        from utu.config.loader import load_config
        from utu.config.models import EvalConfig

        self.models = models
        self.grading_timeout = load_config("eval", EVAL_CONFIG, EvalConfig).verify_timeout  # the held-out's
        self.propose_new_texts = None  # GEPA's own reflective proposal, with the reflection model

    def evaluate(self, batch: list[dict], candidate: dict[str, str], capture_traces: bool = False) -> "EvaluationBatch":
        from gepa import EvaluationBatch

        system = candidate["system_prompt"]
        with ThreadPoolExecutor(PARALLEL) as pool:
            replies = list(pool.map(lambda row: self.models.answer(system, row["question"]), batch))
        graded = asyncio.run(grade_all([str(row["answer"]) for row in batch], replies, self.grading_timeout))
        scores, traces = [], []
        for row, reply, (ok, note) in zip(batch, replies, graded, strict=True):
            scores.append(1.0 if ok else 0.0)
            feedback = "correct" if ok else f"incorrect: {note}; the correct answer is {row['answer']}"
            traces.append({"question": row["question"], "reply": reply, "feedback": feedback})
        return EvaluationBatch(outputs=replies, scores=scores, trajectories=traces if capture_traces else None)

    def make_reflective_dataset(self, candidate, eval_batch, components_to_update):
        return {
            name: [
                {"Inputs": t["question"], "Generated Outputs": t["reply"], "Feedback": t["feedback"]}
                for t in eval_batch.trajectories
            ]
            for name in components_to_update
        }


def optimise_prompt(
    train: list[dict], val: list[dict], seed_prompt: str, budget: int, seed: int, run_dir: Path
) -> dict:
    """GEPA from the agent's own instructions, stopped at `budget` agent calls; its best prompt and its spend.
    Kept in run_dir/found.json once it ends: a sitting that stops after it (in the held-out evaluation) finds it
    there, and GEPA is not resumed past its budget, where it spends more and may change its best prompt."""
    found = run_dir / "found.json"
    if found.exists():
        return json.loads(found.read_text())
    run_dir.mkdir(parents=True, exist_ok=True)
    models = _Models(run_dir / "spend.json")
    import gepa

    result = gepa.optimize(
        seed_candidate={"system_prompt": seed_prompt},
        trainset=train,
        valset=val,
        adapter=AgentAdapter(models),
        reflection_lm=models.reflect,
        max_metric_calls=budget,
        seed=seed,
        run_dir=str(run_dir),
        raise_on_exception=False,
    )
    best = result.best_candidate
    outcome = {
        "best_prompt": best["system_prompt"] if isinstance(best, dict) else best,
        "candidates": len(result.candidates),
        "val_scores": result.val_aggregate_scores,
        "best_val_score": result.val_aggregate_scores[result.best_idx],
        "metric_calls": result.total_metric_calls,
        **models.spent(),
    }
    _write_whole(found, outcome)
    return outcome


def _write_whole(path: Path, data: dict) -> None:
    """`data` as JSON at `path`, whole or not at all: a sitting stopped mid-write leaves the earlier file."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(data))
    os.replace(partial, path)
