"""How a chat model sees tools during GRPO: the tools in its prompt, its calls read from its reply, the results
as the tokens its chat template puts after an assistant turn.

- The prompt: the chat template renders the tool schemas (`apply_chat_template(..., tools=...)`, as Qwen2.5's
  does); a template that ignores them (SmolLM2's) gets them in the system message, with the `<tool_call>`
  format spelled out.
- The calls: what the agent reads (`utu.agents.text_tool_calls`: `<tool_call>` blocks, a bare or fenced JSON
  call of an offered tool).
- The results: the model's own tokens of a turn stay as it wrote them (its EOS included); what follows them is
  the difference between the template's rendering of a conversation with and without the tool messages, minus
  the EOS the model already wrote. No turn is ever re-rendered, so the tokens trained on are the tokens sampled.
"""

import json
import re
from collections.abc import Callable
from typing import Any

from utu.agents.text_tool_calls import text_tool_calls
from utu.errors import ConfigError
from utu.tools.base import cut_middle
from utu.tools.runner import ToolRunner

TOOLS_IN_SYSTEM = """You can call these tools:
{tools}
To call one, reply with only <tool_call>{{"name": "<tool name>", "arguments": {{...}}}}</tool_call>; its result
comes back in the next message. Otherwise reply with your answer."""
_MARK = "ASSISTANT-TURN-END-MARK"  # a content no template changes, to find where an assistant turn's text ends
_RESULT = "TOOL-RESULT-MARK-{}-END"  # where each result's text goes in the rendered template
_RESULT_SPLIT = r"TOOL-RESULT-MARK-(\d+)-END"


class ToolChat:
    def __init__(
        self,
        tokenizer: Any,
        runner: ToolRunner,
        max_turns: int = 4,
        max_result_chars: int = 2000,
        bare_calls: bool = True,
        read_calls: Callable[[str], list[dict[str, Any]]] | None = None,
    ):
        """`max_turns`: model turns per completion, the agent config's; `read_calls(text)` gives the API-style
        calls a reply makes (default: the agent's reading; `bare_calls=False`: <tool_call> blocks only)."""
        self.tokenizer = tokenizer
        self.runner = runner
        self.max_turns = max_turns
        self.max_result_chars = max_result_chars
        self.read_calls = read_calls or (lambda text: text_tool_calls(text, runner.names, bare_calls))
        try:  # a template that cannot show tool results fails here, before any training
            self._turn = self._render(_conversation(), generation_prompt=False)  # the same for every result
            self._after_turn = self._text_after_turn()
            self.result_ids(["{}"])
        except ConfigError:
            raise
        except Exception as e:  # noqa: BLE001 - jinja's errors, a role the template refuses
            raise ConfigError(f"agent.toolkits: this model's chat template cannot show tool results: {e}") from e

    def prompt(self, messages: list[dict[str, Any]]) -> str:
        """The prompt text of a conversation, ending with the assistant's generation prompt."""
        render = self.tokenizer.apply_chat_template
        plain = render(messages, add_generation_prompt=True, tokenize=False)
        if not self.runner.schemas:
            return plain
        with_tools = render(messages, tools=self.runner.schemas, add_generation_prompt=True, tokenize=False)
        if with_tools != plain:
            return with_tools
        listing = "\n".join(json.dumps(s["function"], ensure_ascii=False) for s in self.runner.schemas)
        note = TOOLS_IN_SYSTEM.format(tools=listing)
        if messages and messages[0].get("role") == "system":
            messages = [{**messages[0], "content": f"{messages[0]['content']}\n\n{note}"}, *messages[1:]]
        else:
            messages = [{"role": "system", "content": note}, *messages]
        return render(messages, add_generation_prompt=True, tokenize=False)

    def result_ids(self, results: list[str]) -> list[int]:
        """The tokens that follow an assistant turn (after its EOS) when its calls returned `results`, up to
        the next assistant turn's generation prompt. Each result is cut in the middle to `max_result_chars`."""
        contents = [cut_middle(r, self.max_result_chars) for r in results]
        tools = [{"role": "tool", "content": _RESULT.format(i)} for i in range(len(contents))]
        before = self._turn
        after = self._render(_conversation() + tools, generation_prompt=True)
        if not after.startswith(before):
            raise ConfigError(
                "agent.toolkits: this model's chat template renders an assistant turn differently once tool "
                "results follow it, so results cannot be appended to what the model wrote; use a model whose "
                "template supports the tool role (Qwen2.5, SmolLM2, Llama 3)"
            )
        # The template's scaffolding keeps its special tokens; a result's text never makes one (a tool that
        # prints "<|im_end|>" must not end a turn in what the model is trained on).
        ids: list[int] = []
        parts = re.split(_RESULT_SPLIT, self._after_turn + after[len(before) :])
        for i, part in enumerate(parts):
            if i % 2:
                ids += self._encode(contents[int(part)], split_special_tokens=True)
            elif part:
                ids += self._encode(part)
        return ids

    def _encode(self, text: str, **kw: Any) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False, **kw)["input_ids"]

    def _text_after_turn(self) -> str:
        """What the template writes after an assistant turn's text, the EOS the model writes itself left out
        (Qwen2.5 and SmolLM2: "\\n" after "<|im_end|>")."""
        tail = self._turn[self._turn.rindex(_MARK) + len(_MARK) :]
        eos = self.tokenizer.eos_token or ""
        return tail[len(eos) :] if eos and tail.startswith(eos) else tail

    def _render(self, messages: list[dict[str, Any]], generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=False)


def _conversation() -> list[dict[str, str]]:
    return [{"role": "user", "content": "question"}, {"role": "assistant", "content": _MARK}]
