"""Write the enhanced agent: the baseline agent, unchanged (model settings, max_turns, tools, placement),
plus the learned library, which `build_messages` places exactly as it did during practice."""

import re
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from utu.config.loader import packaged_configs
from utu.config.models import AgentConfig, EvalConfig
from utu.errors import ConfigError, RunFailed
from utu.names import NotWritten, check_name, inside, replace_texts
from utu.practice.library import Library
from utu.router import STATE_FILE


def enhanced_agent(baseline: AgentConfig, library: Library, router_state: Path | None = None) -> AgentConfig:
    """The baseline with the library; with `router_state` (the practice's trained router), its router starts there."""
    update: dict = {"experiences": dict(library.experiences)}
    if baseline.tool_router is not None and router_state is not None:
        update["tool_router"] = baseline.tool_router.model_copy(update={"state": str(router_state)})
    return baseline.model_copy(update=update)


def agent_yaml(agent: AgentConfig, agent_source: dict | None = None, note: str = "") -> str:
    """The agent as YAML. Settings that came from the environment (`${oc.env:...}` in `agent_source`, the agent
    as written) stay references: the exported agent talks to the endpoint configured when it is used, like the
    baseline, not to the one of the practice run, and an MCP server's keys stay in the environment; so does an
    experience the baseline wrote with one and the library still holds. Every other text is escaped (`literal`): a
    learned experience that says `${oc.env:UTU_LLM_API_KEY}` stays those words."""
    data = _keep_references(agent.model_dump(), agent_source or {})
    held = (agent_source or {}).get("experiences")
    held = held if isinstance(held, dict) else {}
    data["experiences"] = {key: _held_or_literal(text, held.get(key)) for key, text in agent.experiences.items()}
    provider = data["model"]["model_provider"]
    if not _reads_environment(provider.get("api_key")):
        provider["api_key"] = "${oc.env:UTU_LLM_API_KEY,null}"  # never write a key to disk
    embeddings = (data.get("tool_router") or {}).get("embeddings") or {}
    if embeddings.get("api_key") and not _reads_environment(embeddings["api_key"]):
        embeddings["api_key"] = "${oc.env:UTU_EMBED_API_KEY,null}"
    note = f"# {note}\n" if note else ""  # below the package line, which Hydra reads only at the top
    return "# @package _global_\n" + note + _yaml(data)


# An environment reference as OmegaConf reads one: `${oc.env:` (spaces allowed inside) behind no backslash, or an
# even run of them.
_READS_ENVIRONMENT = re.compile(r"(?<!\\)(?:\\\\)*\$\{\s*oc\.env\s*:")


def _reads_environment(value: Any) -> bool:
    """A setting kept as written, an environment reference (a text escaped by `literal` is none)."""
    return isinstance(value, str) and bool(_READS_ENVIRONMENT.search(value))


def _held_or_literal(text: str, written: Any) -> str:
    """An experience as the library holds it, escaped (`literal`); one the baseline agent held, written with an
    interpolation, and still holds, as it was written (a `${oc.env:...}` in it is never written out as its value)."""
    if isinstance(written, str) and written != text and _resolved(written) == text:
        return written
    return literal(text)


def _resolved(written: str) -> Any:
    """What OmegaConf makes of a text alone (None if it cannot: an interpolation of another key)."""
    try:
        return OmegaConf.create({"text": written}).text
    except OmegaConfBaseException:
        return None


def _keep_references(value: Any, written: Any) -> Any:
    """`value` with each part `written` takes from the environment (`${oc.env:...}`) that reference again, at any
    depth: a provider's endpoint, an MCP server's env, headers, url and command (lists matched item by item).
    Other interpolations (`${..name}`) name keys outside the agent: their values are written."""
    if _reads_environment(written):
        return written
    if isinstance(value, dict) and isinstance(written, dict):
        return {key: _keep_references(item, written.get(key)) for key, item in value.items()}
    if isinstance(value, list) and isinstance(written, list) and len(value) == len(written):
        return [_keep_references(item, source) for item, source in zip(value, written, strict=True)]
    return literal(value)


def literal(value: Any) -> Any:
    """`value` with each text escaped for OmegaConf, which reads the exported configs: `${` (with any backslashes
    before it) would be an interpolation, resolved when the agent loads (an environment variable's value put into
    the prompt, or a load that fails on `${hh}:${mm}`)."""
    if isinstance(value, str):
        return re.sub(r"(\\*)\$\{", lambda m: m[1] * 2 + "\\${", value)
    if isinstance(value, dict):
        return {key: literal(item) for key, item in value.items()}
    if isinstance(value, list):
        return [literal(item) for item in value]
    return value


def eval_yaml(evaluation: EvalConfig, agent_name: str, exp_id: str) -> str:
    data = literal(evaluation.model_dump(exclude={"agent"})) | {"exp_id": exp_id}
    header = f"# @package _global_\ndefaults:\n  - /agents/practice@agent: {agent_name}\n  - _self_\n\n"
    if data.get("judge_model") and data["judge_model"]["model_provider"].get("api_key"):
        data["judge_model"]["model_provider"]["api_key"] = "${oc.env:JUDGE_LLM_API_KEY,null}"
    return header + _yaml(data)


def _yaml(data: dict) -> str:
    return yaml.dump(data, Dumper=_OmegaConfSafe, sort_keys=False, allow_unicode=True, width=120)


class _OmegaConfSafe(yaml.SafeDumper):
    """Quotes a text that OmegaConf, which reads our configs, would not read back as that text: its YAML reader
    takes more forms of float than PyYAML's, which writes `1e3` or `1.5_e3` bare."""

    def represent_str(self, data: str) -> yaml.ScalarNode:
        node = super().represent_str(data)
        if node.style is None and not _reads_back(data):
            node.style = '"'
        return node


def _reads_back(text: str) -> bool:
    try:  # (unresolved: an escaped `\${` is a text, not its resolution)
        read = OmegaConf.to_container(OmegaConf.create(f"text: {text}"))
    except (OmegaConfBaseException, yaml.YAMLError):
        return False
    return isinstance(read, dict) and read.get("text") == text


_OmegaConfSafe.add_representer(str, _OmegaConfSafe.represent_str)


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
        exist = "already exists" if len(taken) == 1 else "already exist"
        raise ConfigError(f"--export_to {name}: {' and '.join(taken)} {exist}; choose another name")


# The comment that marks an agent file practice may replace (`practice_mark`): its second line, below Hydra's
# `# @package` (read only at the top: the file is then a config by name too), or its first, as written before.
WRITTEN_BY_PRACTICE = "Written by utu practice"


def written_by_practice(path: Path, exp_id: str | None = None) -> bool:
    """Whether practice wrote `path` (by experiment `exp_id`, if given): its whole mark, as `practice_mark` writes
    it, on one of its first two lines (a hand-edited copy that changed the mark is the user's)."""
    exp_ids = re.escape(exp_id) if exp_id is not None else r"[^)\n]*"
    mark = re.compile(rf"# {re.escape(WRITTEN_BY_PRACTICE)} \(exp_id {exp_ids}\); a later practice may replace it\.")
    try:
        with path.open(encoding="utf-8") as f:
            first_lines = f.read(4096).splitlines()[:2]
    except (OSError, UnicodeDecodeError):
        return False
    return any(mark.fullmatch(line) for line in first_lines)


def practice_mark(exp_id: str) -> str:
    return f"{WRITTEN_BY_PRACTICE} (exp_id {exp_id}); a later practice may replace it."


def practice_agent_path(configs: Path, name: str) -> Path:
    """configs/agents/practice/<name>.yaml, refusing (before any work) to replace a file practice did not write:
    a shipped config, or one the user wrote by hand."""
    check_name(name, "export_agent")
    path = inside(configs, "agents", "practice", f"{name}.yaml")
    for candidate in dict.fromkeys([path, packaged_configs() / "agents" / "practice" / f"{name}.yaml"]):
        if candidate.exists() and not written_by_practice(candidate):
            raise ConfigError(
                f"export_agent {name}: {candidate} exists and was not written by practice; "
                "refusing to replace it (rename it, or choose another export_agent)"
            )
    return path


# The plots utu.practice.report writes beside report.md in a run's folder (runs/<exp_id>/).
REPORT_PLOTS = ("reward_per_step.png", "library_size.png", "tokens_per_stage.png", "tool_calls_per_step.png")


def forget_outputs(exp_id: str, run_dir: Path, practice_agent: Path | None) -> None:
    """`--fresh`: the enhanced agent and report of the run forgotten, which would otherwise outlive it (and be
    evaluated as this run's if it learns nothing); each only if that run wrote it (its mark says so), and
    the plots only with them: `--output_dir` may name a folder that holds the user's own files."""
    agent, report = run_dir / "enhanced_agent.yaml", run_dir / "report.md"
    ours = [path for path in (agent, practice_agent) if path is not None and written_by_practice(path, exp_id)]
    ours += [report] if _starts_with(report, f"# Practice report: {exp_id}\n") else []
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
    with `export_agent` as the agent config of that name (replacing only what practice wrote before). Every file is
    written whole or not at all (never through a link planted at its name); one that cannot be written leaves none
    of the others, and a `RunFailed` line (the steps are saved: the same command exports them again)."""
    router_state = output_dir / STATE_FILE
    agent = enhanced_agent(evaluation.agent, library, router_state if router_state.exists() else None)
    agent_text = agent_yaml(agent, agent_source, practice_mark(exp_id))
    files, texts = {"agent": output_dir / "enhanced_agent.yaml"}, {"agent": agent_text}
    if export_agent:
        files["practice_agent"], texts["practice_agent"] = practice_agent_path(configs, export_agent), agent_text
    if export_to:
        check_export_target(configs, export_to)
        files["exported_agent"], files["exported_eval"] = export_paths(configs, export_to)
        texts |= {"exported_agent": agent_text, "exported_eval": eval_yaml(evaluation, export_to, f"{export_to}_eval")}
    try:
        replace_texts({files[key]: texts[key] for key in files})
    except NotWritten as e:
        also = f"; written before it failed: {', '.join(map(str, e.written))}" if e.written else ""
        raise RunFailed(
            f"{e.path}: cannot write the enhanced agent ({e.strerror}){also}; the library is saved: free the place "
            "and run the same command again to export it"
        ) from e
    return files
