"""Build an `LLMClient` from a `ModelConfig`, starting the embedded model when no endpoint is set."""

import logging
import urllib.parse

from utu.config.models import ModelConfig
from utu.errors import ConfigError
from utu.llm import local
from utu.llm.client import LLMClient
from utu.llm.usage import UsageTracker
from utu.tracing.redact import register_secret

log = logging.getLogger(__name__)


def make_client(config: ModelConfig, usage: UsageTracker | None = None, env_prefix: str = "UTU_LLM") -> LLMClient:
    provider = config.model_provider
    register_secret(provider.api_key)  # a key written in a YAML file is masked like one from the environment
    if provider.base_url:
        check_base_url(provider.base_url, env_prefix)
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
