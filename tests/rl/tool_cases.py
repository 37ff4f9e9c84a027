"""The tiny world of tests/rl/test_tools.py: a tiny Llama that ends its turns often, and tools to call."""

import asyncio
import time
from typing import Any

import torch
from transformers import LlamaForCausalLM

from utu.rl.toy import tiny_llama
from utu.tools.base import function_schema

SHARPEN = 8.0
EOS_BOOST = 2.5  # added to the EOS logit: turns of a few tokens, so completions hold several


class TurnEnder(LlamaForCausalLM):
    """The toy Llama with its EOS logit raised everywhere (sampling and training alike)."""

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        out = super().forward(*args, **kwargs)
        is_eos = torch.arange(out.logits.size(-1), device=out.logits.device) == self.config.eos_token_id
        out.logits = out.logits + EOS_BOOST * is_eos
        return out


def turn_ender(vocab_size: int, seed: int = 0) -> TurnEnder:
    """With sharp attention (queries and keys scaled up): a random model attends almost uniformly, and would
    not notice a token at the wrong position."""
    base = tiny_llama(vocab_size, seed=seed)
    model = TurnEnder(base.config)
    model.load_state_dict(base.state_dict())
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(SHARPEN)
            layer.self_attn.k_proj.weight.mul_(SHARPEN)
    return model


def call(name: str, arguments: str = "{}") -> dict[str, Any]:
    return {"id": "c0", "type": "function", "function": {"name": name, "arguments": arguments}}


class Fixed:
    """One tool, `look`, whose result is always the same text."""

    def __init__(self, result: str = "7"):
        self.result, self.calls = result, 0

    def schemas(self) -> list[dict[str, Any]]:
        return [function_schema("look", "Look it up.", {}, [])]

    async def call(self, name: str, arguments: dict[str, Any]) -> str:
        self.calls += 1
        return self.result


class Broken(Fixed):
    """A toolkit with a bug: every call raises."""

    async def call(self, name: str, arguments: dict[str, Any]) -> str:
        raise RuntimeError("the lookup table is gone")


class Together(Fixed):
    """Each call waits until `expected` calls have started: it finishes only if the calls run concurrently."""

    def __init__(self, expected: int):
        super().__init__()
        self.expected, self.started = expected, 0
        self.all_in = asyncio.Event()

    async def call(self, name: str, arguments: dict[str, Any]) -> str:
        self.started += 1
        if self.started >= self.expected:
            self.all_in.set()
        await asyncio.wait_for(self.all_in.wait(), 10)
        return self.result


def sleepy(seconds: float = 30.0) -> str:
    """Takes its time."""
    time.sleep(seconds)
    return "never"
