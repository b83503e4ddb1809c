"""Reasoning in the neutral shape (gateway/conversation_request.py): the Effort, its one table of thinking
budgets read both ways, and each wire's thinking read into an Effort and written back from one, Anthropic's
thinking block and output_config.effort beside each other, Gemini's thinkingConfig likewise."""
from typing import get_args

import pytest

from gateway.chat_serializers import EFFORTS
from gateway.conversation_request import Effort, budget_effort, thinking_budget
from gateway.gemini_api.request import chat_request
from gateway.messages.request import translate
from gateway.upstream.anthropic_request import (
    messages_request,
    read_effort,
    read_thinking,
    thinking_block,
)
from gateway.upstream.gemini_request import generate_request, read_thinking_config, thinking_config

BUDGETS = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 16384, "xhigh": 24576, "max": 24576}
# What each effort's budget reads back as: itself up to high, high past it (OpenAI's most widely taken step).
READ_BACK = {"none": "none", "minimal": "minimal", "low": "low", "medium": "medium", "high": "high",
             "xhigh": "high", "max": "high"}
# What each effort's thinking block reads back as on Anthropic's own, wider steps.
ANTHROPIC_READ_BACK = {"minimal": "low", "low": "low", "medium": "medium", "high": "medium", "xhigh": "high",
                       "max": "high"}
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def _fetch_image(url, where):
    raise AssertionError("no image to fetch")


# ---------------------------------------------------------------- the conversation's effort

def test_chat_takes_exactly_the_conversations_efforts_weakest_first():
    assert EFFORTS == get_args(Effort) == ("none", "minimal", "low", "medium", "high", "xhigh", "max")


@pytest.mark.parametrize("effort", get_args(Effort))
def test_every_effort_stands_for_its_budget_and_none_for_no_thinking(effort):
    assert thinking_budget(effort) == BUDGETS.get(effort)


def test_no_effort_and_what_is_no_effort_stand_for_no_thinking():
    for effort in (None, "bogus", "HIGH", 1, [], {}):
        assert thinking_budget(effort) is None


@pytest.mark.parametrize("effort", [effort for effort in get_args(Effort) if effort != "none"])
def test_every_effort_s_budget_reads_back_as_itself_up_to_high(effort):
    assert budget_effort(thinking_budget(effort)) == READ_BACK[effort]


@pytest.mark.parametrize(("budget", "effort"), [(1, "minimal"), (1024, "minimal"), (1025, "low"), (2048, "low"),
                                                (2049, "medium"), (8192, "medium"), (8193, "high"), (16384, "high"),
                                                (16385, "high"), (24576, "high"), (10**6, "high")])
def test_a_budget_reads_as_the_weakest_effort_that_holds_it(budget, effort):
    assert budget_effort(budget) == effort


# ---------------------------------------------------------------- Anthropic

@pytest.mark.parametrize("effort", [effort for effort in get_args(Effort) if effort != "none"])
def test_every_effort_goes_to_an_anthropic_thinking_block_and_comes_back_on_anthropic_s_steps(effort):
    block = thinking_block(effort, 100_000)
    assert block == {"type": "enabled", "budget_tokens": BUDGETS[effort]}
    assert read_thinking(block) == ANTHROPIC_READ_BACK[effort]


def test_no_effort_is_no_thinking_block_and_the_budget_stays_below_max_tokens():
    assert thinking_block(None, 100_000) is None
    assert thinking_block("none", 100_000) is None
    assert thinking_block("max", 2000) == {"type": "enabled", "budget_tokens": 1999}


@pytest.mark.parametrize(("budget", "effort"), [(1, "low"), (4096, "low"), (4097, "medium"), (16384, "medium"),
                                                (16385, "high"), (31999, "high")])
def test_an_anthropic_budget_reads_as_its_step(budget, effort):
    assert read_thinking({"type": "enabled", "budget_tokens": budget}) == effort


def test_adaptive_thinking_is_medium_disabled_is_none_and_anthropic_s_effort_wins():
    assert read_thinking({"type": "adaptive"}) == read_thinking({"type": "between_tools"}) == "medium"
    assert read_thinking({"type": "disabled"}) is None
    assert read_thinking(None) is None
    assert read_thinking({"type": "enabled", "budget_tokens": 31999}, "low") == "low"
    assert read_thinking(None, "max") == "high"
    assert read_thinking({"type": "disabled"}, "high") is None


@pytest.mark.parametrize(("wanted", "effort"), [("low", "low"), ("medium", "medium"), ("high", "high"),
                                                ("xhigh", "high"), ("max", "high"), ("minimal", None),
                                                ("none", None), ("LOW", None), (1, None), ([], None), ({}, None)])
def test_anthropic_s_efforts_read_as_the_conversation_s_and_any_other_as_none(wanted, effort):
    assert read_effort(wanted, None) == effort
    assert read_effort(wanted, {"type": "disabled"}) is None


def test_a_messages_request_s_thinking_reaches_an_anthropic_deployment_as_the_budget_of_its_effort():
    body = {"model": "m", "max_tokens": 32000, "messages": [{"role": "user", "content": "hi"}],
            "thinking": {"type": "enabled", "budget_tokens": 10000}}
    params, notes = translate(body)
    assert params["reasoning_effort"] == "medium" and notes.reasoning_from == "thinking"
    sent = messages_request(params, model="claude", max_tokens_default=4096)
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 8192}


def test_an_effort_a_messages_request_cannot_use_is_named_left_out():
    body = {"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}],
            "thinking": {"type": "disabled"}, "output_config": {"effort": "high"}}
    params, notes = translate(body)
    assert "reasoning_effort" not in params and notes.dropped == ["output_config.effort"]
    params, notes = translate({**body, "thinking": None, "output_config": {"effort": ["high"]}})
    assert "reasoning_effort" not in params and notes.dropped == ["output_config.effort"]


# ---------------------------------------------------------------- Gemini

@pytest.mark.parametrize("effort", get_args(Effort))
def test_every_effort_goes_to_a_thinking_config_and_comes_back_up_to_high(effort):
    config = thinking_config(effort)
    assert config == {"thinkingBudget": BUDGETS.get(effort, 0)}
    assert read_thinking_config(None, config["thinkingBudget"]) == READ_BACK[effort]


@pytest.mark.parametrize(("level", "budget", "effort"), [
    ("MINIMAL", None, "minimal"), ("low", None, "low"), ("Medium", 0, "medium"), ("HIGH", 1, "high"),
    ("THINKING_LEVEL_UNSPECIFIED", 2049, "medium"), (None, 0, "none"), (None, 1025, "low"), (None, 99999, "high"),
    (None, -1, None), (None, -2, None), (None, True, None), (None, 1024.0, None), (1, "1024", None), (None, None, None)])
def test_a_thinking_level_wins_and_a_budget_reads_as_its_effort(level, budget, effort):
    assert read_thinking_config(level, budget) == effort


def test_a_gemini_request_s_thinking_reaches_a_gemini_deployment_as_the_budget_of_its_effort():
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
            "generationConfig": {"thinkingConfig": {"thinkingBudget": 5000, "includeThoughts": True}}}
    found = chat_request(body, "gemini-x")
    assert found.params["reasoning_effort"] == "medium"
    assert found.ignored == ["generationConfig.thinkingConfig.includeThoughts"]
    sent = generate_request(found.params, _fetch_image)
    assert sent["generationConfig"]["thinkingConfig"] == {"thinkingBudget": 8192}


def test_a_chat_request_without_an_effort_sends_no_thinking_config():
    assert "generationConfig" not in generate_request(CHAT, _fetch_image)
    assert generate_request({**CHAT, "reasoning_effort": "none"}, _fetch_image)["generationConfig"] == {
        "thinkingConfig": {"thinkingBudget": 0}}
