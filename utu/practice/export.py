"""Write the enhanced agent: the baseline agent, unchanged (model settings, max_turns, tools, placement),
plus the learned library, which `build_messages` places exactly as it did during practice."""

from pathlib import Path
from typing import Any

import yaml

from utu.config.loader import packaged_configs
from utu.config.models import AgentConfig, EvalConfig
from utu.errors import ConfigError
from utu.names import check_name, inside
from utu.practice.library import Library
from utu.router import STATE_FILE


def enhanced_agent(baseline: AgentConfig, library: Library, router_state: Path | None = None) -> AgentConfig:
    """The baseline with the library; with `router_state` (the practice's trained router), its router starts there."""
    update: dict = {"experiences": dict(library.experiences)}
    if baseline.tool_router is not None and router_state is not None:
        update["tool_router"] = baseline.tool_router.model_copy(update={"state": str(router_state)})
    return baseline.model_copy(update=update)


def agent_yaml(agent: AgentConfig, agent_source: dict | None = None) -> str:
    """The agent as YAML. Settings that came from the environment (`${oc.env:...}` in `agent_source`, the agent
    as written) stay references: the exported agent talks to the endpoint configured when it is used, like the
    baseline, not to the one of the practice run, and an MCP server's keys stay in the environment."""
    data = _keep_references(agent.model_dump(), agent_source or {})
    provider = data["model"]["model_provider"]
    if not (isinstance(provider.get("api_key"), str) and "${" in provider["api_key"]):
        provider["api_key"] = "${oc.env:UTU_LLM_API_KEY,null}"  # never write a key to disk
    embeddings = (data.get("tool_router") or {}).get("embeddings") or {}
    if embeddings.get("api_key") and "${" not in str(embeddings["api_key"]):
        embeddings["api_key"] = "${oc.env:UTU_EMBED_API_KEY,null}"
    return "# @package _global_\n" + yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=120)


def _keep_references(value: Any, written: Any) -> Any:
    """`value` with each part `written` takes from the environment (`${oc.env:...}`) that reference again, at any
    depth: a provider's endpoint, an MCP server's env, headers, url and command (lists matched item by item).
    Other interpolations (`${..name}`) name keys outside the agent: their values are written."""
    if isinstance(written, str) and "${oc.env:" in written:
        return written
    if isinstance(value, dict) and isinstance(written, dict):
        return {key: _keep_references(item, written.get(key)) for key, item in value.items()}
    if isinstance(value, list) and isinstance(written, list) and len(value) == len(written):
        return [_keep_references(item, source) for item, source in zip(value, written, strict=True)]
    return value


def eval_yaml(evaluation: EvalConfig, agent_name: str, exp_id: str) -> str:
    data = evaluation.model_dump(exclude={"agent"}) | {"exp_id": exp_id}
    header = f"# @package _global_\ndefaults:\n  - /agents/practice@agent: {agent_name}\n  - _self_\n\n"
    if data.get("judge_model") and data["judge_model"]["model_provider"].get("api_key"):
        data["judge_model"]["model_provider"]["api_key"] = "${oc.env:JUDGE_LLM_API_KEY,null}"
    return header + yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=120)


def export_paths(configs: Path, name: str) -> tuple[Path, Path]:
    """The agent and the eval config of an export: two folders, so never the same file, and both inside
    configs/ since `name` is a plain name."""
    return (inside(configs, "agents", "practice", f"{name}.yaml"), inside(configs, "eval", "practice", f"{name}.yaml"))


def check_export_target(configs: Path, name: str) -> None:
    """Refuse, before any work, a name that is not plain or an export over an existing (possibly shipped) config."""
    check_name(name, "--export_to")
    roots = dict.fromkeys([configs, packaged_configs()])  # a shipped config may not be shadowed either
    taken = [str(p) for root in roots for p in export_paths(root, name) if p.exists()]
    if taken:
        raise ConfigError(f"--export_to {name}: {', '.join(taken)} already exists; choose another name")


WRITTEN_BY_PRACTICE = "# Written by utu practice"  # the first line of an agent practice may replace


def practice_agent_path(configs: Path, name: str) -> Path:
    """configs/agents/practice/<name>.yaml, refusing (before any work) to replace a file practice did not write:
    a shipped config, or one the user wrote by hand."""
    check_name(name, "export_agent")
    path = inside(configs, "agents", "practice", f"{name}.yaml")
    for candidate in dict.fromkeys([path, packaged_configs() / "agents" / "practice" / f"{name}.yaml"]):
        if candidate.exists() and not candidate.read_text().startswith(WRITTEN_BY_PRACTICE):
            raise ConfigError(
                f"export_agent {name}: {candidate} exists and was not written by practice; "
                "refusing to replace it (rename it, or choose another export_agent)"
            )
    return path


# The plots utu.practice.report writes beside report.md in a run's folder (runs/<exp_id>/).
REPORT_PLOTS = ("reward_per_step.png", "library_size.png", "tokens_per_stage.png", "tool_calls_per_step.png")


def forget_outputs(exp_id: str, run_dir: Path, practice_agent: Path | None) -> None:
    """`--fresh`: the enhanced agent and report of the run forgotten, which would otherwise outlive it (and be
    evaluated as this run's if it learns nothing); each only if that run wrote it (its first line says so), and
    the plots only with them: `--output_dir` may name a folder that holds the user's own files."""
    agent, report = run_dir / "enhanced_agent.yaml", run_dir / "report.md"
    ours = [
        path
        for path, first in (
            (agent, f"{WRITTEN_BY_PRACTICE} (exp_id {exp_id});"),
            (report, f"# Practice report: {exp_id}\n"),
            (practice_agent, f"{WRITTEN_BY_PRACTICE} (exp_id {exp_id});"),
        )
        if path is not None and _starts_with(path, first)
    ]
    if agent in ours or report in ours:
        ours += [run_dir / name for name in REPORT_PLOTS]
    for path in ours:
        path.unlink(missing_ok=True)


def _starts_with(path: Path, text: str) -> bool:
    try:
        with path.open(encoding="utf-8") as f:
            return f.read(len(text)) == text
    except (OSError, UnicodeDecodeError):
        return False


def write_outputs(
    evaluation: EvalConfig,
    library: Library,
    *,
    exp_id: str,
    output_dir: Path,
    export_to: str | None,
    configs: Path,
    agent_source: dict | None = None,
    export_agent: str | None = None,
) -> dict[str, Path]:
    """The enhanced agent under the run's folder, with `export_to` also into configs/ (never over a file), and
    with `export_agent` as the agent config of that name (replacing only what practice wrote before)."""
    router_state = output_dir / STATE_FILE
    agent = enhanced_agent(evaluation.agent, library, router_state if router_state.exists() else None)
    text = f"{WRITTEN_BY_PRACTICE} (exp_id {exp_id}); a later practice may replace it.\n" + agent_yaml(
        agent, agent_source
    )
    out = {"agent": output_dir / "enhanced_agent.yaml"}
    output_dir.mkdir(parents=True, exist_ok=True)
    out["agent"].write_text(text)
    if export_agent:
        path = practice_agent_path(configs, export_agent)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        out["practice_agent"] = path
    if export_to:
        check_export_target(configs, export_to)
        agent_path, eval_path = export_paths(configs, export_to)
        agent_path.parent.mkdir(parents=True, exist_ok=True)
        eval_path.parent.mkdir(parents=True, exist_ok=True)
        agent_path.write_text(text)
        eval_path.write_text(eval_yaml(evaluation, f"{export_to}", f"{export_to}_eval"))
        out |= {"exported_agent": agent_path, "exported_eval": eval_path}
    return out
