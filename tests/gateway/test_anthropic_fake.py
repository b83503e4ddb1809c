"""The fake Anthropic upstream (anthropic_fake.py) held against Anthropic's official client.

Every answer, stream and error the gateway's tests script is parsed here by the anthropic SDK,
pointed at the fake: if the real client would reject a shape, so does this file. And the SDK's
own requests (text, tools, a tool round trip, images) must pass the fake's checks: the fake may be
no stricter than the real API is with the real client.
"""
import anthropic
import pytest
from anthropic.types import Message

from tests.gateway.anthropic_fake import (
    ANTHROPIC_KEY,
    FakeAnthropic,
    answer,
    error_body,
    message,
    stream_error,
    stream_events,
    text_block,
    tool_block,
    usage,
)

WEATHER = {"name": "get_weather", "description": "The weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


@pytest.fixture
def fake():
    server = FakeAnthropic().start()
    yield server
    server.stop()


@pytest.fixture
def sdk(fake):
    with anthropic.Anthropic(base_url=fake.base_url, api_key=ANTHROPIC_KEY, max_retries=0, timeout=10) as client:
        yield client


ANSWERS = {
    "text": answer("Hello there", counts=usage(20, 4, cache_read=12, cache_creation=3)),
    "tool call": message([text_block("Let me look."), tool_block("get_weather", {"city": "Paris"})],
                         stop_reason="tool_use"),
    "length": answer("Cut", stop_reason="max_tokens"),
    "stop sequence": answer("Up to", stop_reason="stop_sequence", stop_sequence="END"),
    "refusal": message([], stop_reason="refusal"),
}


@pytest.mark.parametrize("name", ANSWERS)
def test_the_sdk_parses_every_answer_the_fake_sends(fake, sdk, name):
    body = ANSWERS[name]
    Message.model_validate(body)
    fake.answer(body)
    parsed = sdk.messages.create(model="claude-test", max_tokens=10, messages=[{"role": "user", "content": "Hi"}])
    assert parsed.stop_reason == body["stop_reason"]
    assert [block.type for block in parsed.content] == [block["type"] for block in body["content"]]
    assert fake.problems() == []


def test_the_sdk_reads_a_streamed_answer_with_a_tool_call(fake, sdk):
    fake.stream(*stream_events(["Let", " me look."], ("get_weather", ['{"ci', 'ty": "Oslo"}'], "toolu_1"),
                               stop_reason="tool_use", counts=usage(30, 9, cache_read=10)))
    with sdk.messages.stream(model="claude-test", max_tokens=100, tools=[WEATHER],
                             messages=[{"role": "user", "content": "Weather in Oslo?"}]) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "Let me look."
    assert final.stop_reason == "tool_use" and final.content[1].input == {"city": "Oslo"}
    assert final.content[1].id == "toolu_1"
    assert (final.usage.input_tokens, final.usage.output_tokens, final.usage.cache_read_input_tokens) == (30, 9, 10)
    assert fake.calls[0].body["stream"] is True and fake.problems() == []


def test_the_sdks_tool_round_trip_and_image_requests_pass_the_fakes_checks(fake, sdk):
    sdk.messages.create(model="claude-test", max_tokens=50, system="Be brief.", tools=[WEATHER],
                        tool_choice={"type": "any"}, messages=[
                            {"role": "user", "content": [
                                {"type": "text", "text": "What is this and the weather?"},
                                {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                             "data": "iVBORw0KGgo="}},
                                {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}]},
                            {"role": "assistant", "content": [tool_block("get_weather", {"city": "Oslo"}, "toolu_9")]},
                            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9",
                                                          "content": "Sunny"}]}])
    assert fake.problems() == []


def test_the_fake_refuses_what_the_api_refuses(fake, sdk):
    with pytest.raises(anthropic.BadRequestError):
        sdk.messages.create(model="claude-test", max_tokens=50, messages=[
            {"role": "assistant", "content": [tool_block("get_weather", {"city": "Oslo"}, "toolu_9")]},
            {"role": "user", "content": "no result"}])
    assert "tool_result" in fake.problems()[0]


@pytest.mark.parametrize("status, kind, error", [
    (401, "authentication_error", anthropic.AuthenticationError),
    (403, "permission_error", anthropic.PermissionDeniedError),
    (404, "not_found_error", anthropic.NotFoundError),
    (429, "rate_limit_error", anthropic.RateLimitError),
    (500, "api_error", anthropic.InternalServerError),
    (529, "overloaded_error", anthropic.InternalServerError),
])
def test_the_sdk_reads_the_fakes_errors(fake, sdk, status, kind, error):
    fake.fail(status, error_body(kind, "It failed."))
    with pytest.raises(error) as raised:
        sdk.messages.create(model="claude-test", max_tokens=10, messages=[{"role": "user", "content": "Hi"}])
    assert raised.value.status_code == status and raised.value.body["error"]["type"] == kind


def test_the_sdk_raises_on_a_mid_stream_error_event(fake, sdk):
    events = stream_events(["Hel"])
    fake.stream(*events[:4], stream_error())
    with pytest.raises(anthropic.APIStatusError):
        with sdk.messages.stream(model="claude-test", max_tokens=10,
                                 messages=[{"role": "user", "content": "Hi"}]) as stream:
            "".join(stream.text_stream)
