"""A query's features for the router: its embedding from an OpenAI-compatible `/embeddings` endpoint, cached.

With no endpoint configured, the embedded model's own embeddings server (`utu.llm.local`, started on first use:
llama-server with `--embeddings --pooling mean`) gives them; SmolLM2-135M by default, the smallest bundled model.
"""

import asyncio
from collections import OrderedDict

import numpy as np
import openai

from utu.errors import LLMError

CACHED = 20_000  # questions whose embedding is kept: a 576-float vector and a key of 2000 bytes at most each
DEFAULT_EMBEDDING_MODEL = "smollm2-135m"
# A question's start says what kind it is; its first 2000 bytes of UTF-8 are embedded: a byte-level BPE token
# is at least one byte, so that is within the embedded server's 2048 tokens per input
# (utu.llm.local.EMBEDDING_CTX) whatever the script (Chinese takes 3 bytes a character, English 1).
MAX_BYTES = 2000


def embedded_text(text: str) -> str:
    """What of a question is embedded (and the key its embedding is cached under)."""
    return text.encode()[:MAX_BYTES].decode(errors="ignore") or " "  # an empty input is an error to some endpoints


def checked_vector(embedding: object, source: str) -> np.ndarray:
    """An endpoint's embedding as float32, or LLMError if it is not a vector of finite numbers."""
    try:
        vector = np.asarray(embedding, dtype=np.float32)
    except (TypeError, ValueError):
        vector = np.empty(0, dtype=np.float32)
    if vector.ndim != 1 or not vector.size or not np.isfinite(vector).all():
        raise LLMError(f"embeddings from {source}: a broken vector (empty, NaN or inf)")
    return vector


def endpoint(base_url: str | None, model: str | None, missing_model: str) -> tuple[str, str]:
    """(base URL, model) of the embeddings to use: the endpoint given (with its model's name, else LLMError
    `missing_model`), or the embedded model's embeddings server, started if it is not running."""
    if not base_url:
        from utu.llm import local

        model = model or DEFAULT_EMBEDDING_MODEL
        return local.ensure_running(model, embeddings=True), model
    if not model:
        raise LLMError(missing_model)
    return base_url, model


class Embedder:
    def __init__(self, client: openai.AsyncOpenAI, model: str, *, cached: int = CACHED):
        self.client = client
        self.model = model
        self.cached = cached
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = asyncio.Lock()

    @classmethod
    def connect(cls, base_url: str | None, model: str | None, api_key: str | None = None) -> "Embedder":
        """The endpoint given, else the embedded model's embeddings server (started if it is not running)."""
        missing = "tool_router.embeddings: a base_url needs its model's name (embeddings.model)"
        base_url, model = endpoint(base_url, model, missing)
        return cls(openai.AsyncOpenAI(base_url=base_url, api_key=api_key or "none", max_retries=3), model)

    async def __call__(self, texts: list[str]) -> list[np.ndarray]:
        """One float32 vector per text, in order; texts seen before cost nothing."""
        texts = [embedded_text(t) for t in texts]
        async with self._lock:  # two attempts at one question ask once
            missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
            if missing:
                try:
                    reply = await self.client.embeddings.create(model=self.model, input=missing)
                except openai.OpenAIError as e:
                    raise LLMError(f"embeddings from {self.client.base_url} ({self.model}) failed: {e}") from e
                indices = [d.index for d in reply.data]
                if not all(isinstance(i, int) for i in indices) or sorted(indices) != list(range(len(missing))):
                    raise LLMError(
                        f"embeddings: asked for {len(missing)}, the endpoint gave {len(reply.data)} (indices "
                        f"{indices[:5]})"
                    )
                for text, item in zip(missing, sorted(reply.data, key=lambda d: d.index), strict=True):
                    self._cache[text] = checked_vector(item.embedding, str(self.client.base_url))
            for text in texts:
                self._cache.move_to_end(text)
            while len(self._cache) > self.cached:
                self._cache.popitem(last=False)
            return [self._cache[t] for t in texts]

    async def one(self, text: str) -> np.ndarray:
        return (await self([text]))[0]
