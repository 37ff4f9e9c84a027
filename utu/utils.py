"""The names of Youtu-Agent's `utu.utils` that its verify functions import, so its files run unchanged here:
`FileUtils` (its prompt files by name, Jinja templates) and `SimplifiedAsyncOpenAI` (a one-call LLM client).
Only what those files use; utu's own code does not use this module."""

import importlib.resources
from typing import Any

import yaml

PROMPTS = importlib.resources.files("utu") / "prompts"


class FileUtils:
    @staticmethod
    def load_prompts(name: str) -> dict[str, str]:
        """A prompt file by its name under Youtu-Agent's utu/prompts/ (e.g. "practice/verify.yaml")."""
        return yaml.safe_load((PROMPTS / name).read_text(encoding="utf-8"))

    @staticmethod
    def get_jinja_template_str(template: str) -> Any:
        import jinja2

        return jinja2.Template(template)


class SimplifiedAsyncOpenAI:
    """`await SimplifiedAsyncOpenAI().query_one(messages=...)`: one call to the endpoint of the environment
    (UTU_LLM_*, by utu's endpoint rule). Made cheaply: Youtu's verifiers build one as a default argument even
    when they are handed the run's judge."""

    def __init__(
        self,
        *,
        type: str | None = None,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        **settings: Any,
    ):
        given = {"type": type, "model": model, "base_url": base_url, "api_key": api_key}
        self.provider = {key: value for key, value in given.items() if value is not None}
        self.settings = settings  # sampling settings (temperature, ...), sent with each call

    async def query_one(self, messages: list[dict[str, Any]] | str | None = None, **settings: Any) -> str:
        from utu.config.models import ModelConfig
        from utu.llm.factory import make_client

        async with make_client(ModelConfig.model_validate({"model_provider": self.provider})) as client:
            return await client.query_one(messages, **(self.settings | settings))
