"""The one place that puts an experience library into an agent's messages.

Practice rollouts, evaluation of the enhanced agent and the exported agent config all go through
`build_messages`, so an experience is seen in the same place (system prompt or user message, from the
agent's `experience_placement`) at training and at test time.
"""

from typing import Any

from utu.config.models import AgentConfig

EXPERIENCE_HEADER = (
    "When solving problems, you MUST first carefully read and understand the helpful instructions and experiences:"
)


def format_experiences(experiences: dict[str, str]) -> str:
    return "\n".join(f"[{key}]. {text}" for key, text in experiences.items())


def build_messages(
    config: AgentConfig, question: str, experiences: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """System and user messages for one question. `experiences=None` uses the agent's own library."""
    return place_library(config, [{"role": "user", "content": question}], experiences)


def place_library(
    config: AgentConfig, conversation: list[dict[str, Any]], experiences: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """The agent's system prompt and library put into a conversation (for one question: its user message).
    The library goes after the system prompt, or (placement `user`) after the last user message, the
    question; a system message of the conversation's own follows the agent's system prompt."""
    library = config.experiences if experiences is None else experiences
    system = config.instructions.rstrip()
    rest = [m for m in conversation if m.get("role") != "system"]
    own = [
        _text(m["content"])
        for m in conversation
        if m.get("role") == "system" and isinstance(m.get("content"), str | list)
    ]
    if library:
        block = f"{EXPERIENCE_HEADER}\n{format_experiences(library)}"
        last_user = max((i for i, m in enumerate(rest) if m.get("role") == "user"), default=None)
        if config.experience_placement == "system" or last_user is None:
            system = f"{system}\n\n{block}"
        else:
            question, content = rest[last_user], rest[last_user].get("content")
            if isinstance(content, list):  # content parts (text, images): the library is one more text part
                rest[last_user] = {**question, "content": [*content, {"type": "text", "text": block}]}
            else:
                rest[last_user] = {**question, "content": f"{content or ''}\n\n{block}"}
    system = "\n\n".join([system, *own])
    return [{"role": "system", "content": system}, *rest]


def _text(content: str | list) -> str:
    """A message's text: its string, or its text parts joined (OpenAI's content-part form)."""
    if isinstance(content, str):
        return content
    return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
