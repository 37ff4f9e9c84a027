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
    library = config.experiences if experiences is None else experiences
    system, user = config.instructions.rstrip(), question
    if library:
        block = f"{EXPERIENCE_HEADER}\n{format_experiences(library)}"
        if config.experience_placement == "system":
            system = f"{system}\n\n{block}"
        else:
            user = f"{question}\n\n{block}"
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]
