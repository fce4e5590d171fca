"""``StartAgent.of``: the one builder of the effect that (re)starts an agent, from a
conversation or from the prompt that carries it."""

from __future__ import annotations

from threadspindle.runtime.core import effect_types as F
from threadspindle.runtime.core.model import Conversation

CARRIED = [name for name in F.StartAgent.model_fields if name != "type"]


def test_start_agent_of_a_conversation_carries_every_field() -> None:
    conv = Conversation(
        agent="codex", workdir="/work/a", session_id="s9", model="m1", system_instruction="be"
    )
    start = F.StartAgent.of(conv)
    assert {name: getattr(start, name) for name in CARRIED} == {
        name: getattr(conv, name) for name in CARRIED
    }


def test_start_agent_of_a_prompt_is_the_start_of_its_conversation() -> None:
    conv = Conversation(agent="gemini", workdir="/work/b", session_id=None, model="m2")
    prompt = F.PromptAgent(
        run_id="r1", text="hi", **{name: getattr(conv, name) for name in CARRIED}
    )
    assert F.StartAgent.of(prompt) == F.StartAgent.of(conv)
    assert F.StartAgent.of(prompt).model == "m2"
