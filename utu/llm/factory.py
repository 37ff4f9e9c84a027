"""Build an `LLMClient` from a `ModelConfig`, starting the embedded model when no endpoint is set."""

import logging
import os
import urllib.parse

from utu.config.models import ModelConfig
from utu.errors import ConfigError
from utu.llm import local
from utu.llm.client import LLMClient
from utu.llm.usage import UsageTracker
from utu.tracing.redact import register_secret

log = logging.getLogger(__name__)


def make_client(config: ModelConfig, usage: UsageTracker | None = None, env_prefix: str = "UTU_LLM") -> LLMClient:
    """The endpoint rule, one for every model config: `base_url`, `api_key` and `model` from the config, else
    from `<env_prefix>_BASE_URL`, `_API_KEY`, `_MODEL` (the judge's `JUDGE_LLM_*`, or, with no
    `JUDGE_LLM_BASE_URL`, all three of `UTU_LLM_*`), else the embedded model. A config that names a
    `local_model` and no base_url always gets the embedded one. (Youtu-Agent's configs/model/base.yaml
    leaves base_url and api_key out on purpose, for the environment.)"""
    provider = config.model_provider
    # the config's own endpoint, not the environment's that configs/model/base.yaml reads into it
    from_config = bool(provider.base_url) and provider.base_url not in (
        from_env(env_prefix, "BASE_URL"),
        from_env("UTU_LLM", "BASE_URL"),
    )
    if not provider.base_url and not provider.local_model:
        # one endpoint's URL, key and model together: the judge never gets the agent's key for its own URL
        prefix = env_prefix if from_env(env_prefix, "BASE_URL") else "UTU_LLM"
        provider = provider.model_copy(
            update={
                key: getattr(provider, key) or from_env(prefix, name)
                for key, name in (("base_url", "BASE_URL"), ("api_key", "API_KEY"), ("model", "MODEL"))
            }
        )
        config = config.model_copy(update={"model_provider": provider})
    register_secret(provider.api_key)  # a key written in a YAML file is masked like one from the environment
    check_api_key(provider.api_key, env_prefix)
    if provider.base_url:
        check_base_url(provider.base_url, env_prefix)
        if not provider.model and from_config:
            raise ConfigError(
                f"model_provider.base_url is set ({provider.base_url}) but model_provider.model is not: name the model"
                f" in the same config (a config's endpoint is its own; {env_prefix}_* serve a config that names none)"
            )
        if not provider.model:
            raise ConfigError(f"{env_prefix}_BASE_URL is set but {env_prefix}_MODEL is not: set the model name")
        return LLMClient(
            config,
            base_url=provider.base_url,
            model=provider.model,
            api_key=provider.api_key,
            usage=usage,
            env_prefix=env_prefix,
        )
    name = provider.local_model or local.default_model()
    if provider.model and provider.model != name:
        log.warning("%s_MODEL=%s is ignored without %s_BASE_URL", env_prefix, provider.model, env_prefix)
    return LLMClient(
        config,
        base_url=local.ensure_running(name),
        model=name,
        usage=usage,
        env_prefix=env_prefix,
    )


def from_env(prefix: str, name: str) -> str | None:
    """`<prefix>_<name>` from the environment; empty counts as unset."""
    return os.environ.get(f"{prefix}_{name}", "").strip() or None


def check_api_key(key: str | None, env_prefix: str = "UTU_LLM") -> None:
    """A `ConfigError` in one line, never showing the key, for a key an HTTP header cannot carry (the client
    failed on it with a 40-line traceback)."""
    bad = [c for c in key or "" if not 32 < ord(c) < 127]
    if bad:
        control = any(ord(c) < 32 or ord(c) == 127 for c in bad)
        kind = "a control character" if control else "a space or a non-ASCII character"
        raise ConfigError(
            f"{env_prefix}_API_KEY (or model_provider.api_key) holds {kind}, which an HTTP header cannot carry:"
            " copy the key again (a stray newline or quote?)"
        )


def check_base_url(url: str, env_prefix: str = "UTU_LLM") -> None:
    """A `ConfigError` in one line for an endpoint URL the HTTP client would fail on with a traceback."""
    where = f"{env_prefix}_BASE_URL (or model_provider.base_url)"
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - parsing the port is the check: a port that is not a number raises
    except ValueError as e:
        raise ConfigError(f"{where} {url!r} is not a URL ({e}): write it as http://host:port/v1") from None
    if parts.username is not None or parts.password is not None:  # never echo them: they may be a password
        raise ConfigError(f"{where} carries credentials (user:password@): put the key in {env_prefix}_API_KEY")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{where} {url!r} is not an http(s) URL: write it as http://host:port/v1")
