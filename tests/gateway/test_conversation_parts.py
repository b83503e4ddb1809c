"""A message's content parts in the neutral shape (gateway/conversation_request.py): each part to chat and back,
each inbound wire's content read into chat's parts by its decoder and written back to the same wire by its
adapter, each chat part written to each wire, and what a wire cannot carry refused or named, as it was."""
import pytest

from gateway.conversation_request import (
    AudioPart,
    FilePart,
    ImagePart,
    Message,
    RefusalPart,
    TextPart,
    ToolResult,
    content_to_chat,
    conversation_from_chat,
    part_from_chat,
)
from gateway.gemini_api.contents import CallIds
from gateway.gemini_api.contents import turn_messages as gemini_turn
from gateway.gemini_api.members import GeminiRequest
from gateway.messages.content import turn_messages as messages_turn
from gateway.messages.translation import Translation
from gateway.upstream import anthropic_messages, gemini_messages
from utils_app.errors import InvalidRequest, UnsupportedParameter

B64 = "iVBORw0KGgo="
PNG = f"data:image/png;base64,{B64}"
PDF = f"data:application/pdf;base64,{B64}"
PARTS = [TextPart("héllo"), TextPart(""), RefusalPart("I can't."), ImagePart("https://x.test/a.png"),
         ImagePart(PNG, "low"), AudioPart(B64, "wav"), FilePart(PDF, "a.pdf"), FilePart(file_id="file-1"),
         FilePart(PDF, "a.pdf", "file-1")]


def fetched(url, where):
    return {"fetched": url, "where": where}


def refused(kind, call, *args):
    with pytest.raises(kind) as caught:
        call(*args)
    return str(caught.value), caught.value.param


def to_anthropic(*parts, role="user"):
    _, turns = anthropic_messages.conversation(conversation_from_chat([
        {"role": role, "content": [part.to_chat() for part in parts]},
        *([{"role": "user", "content": "q"}] if role != "user" else [])]))
    return turns[0]["content"] if role == "user" else []


def to_gemini(*parts):
    _, contents = gemini_messages.conversation([{"role": "user", "content": [part.to_chat() for part in parts]}],
                                               fetched)
    return contents[0]["parts"] if contents else []


# ---------------------------------------------------------------- chat

@pytest.mark.parametrize("part", PARTS)
def test_every_part_goes_to_chat_and_comes_back(part):
    assert part_from_chat(part.to_chat()) == part


def test_chats_parts_as_written():
    assert [part.to_chat() for part in PARTS[2:]] == [
        {"type": "refusal", "refusal": "I can't."}, {"type": "image_url", "image_url": {"url": "https://x.test/a.png"}},
        {"type": "image_url", "image_url": {"url": PNG, "detail": "low"}},
        {"type": "input_audio", "input_audio": {"data": B64, "format": "wav"}},
        {"type": "file", "file": {"filename": "a.pdf", "file_data": PDF}},
        {"type": "file", "file": {"file_id": "file-1"}},
        {"type": "file", "file": {"filename": "a.pdf", "file_data": PDF, "file_id": "file-1"}}]
    # The members' order too: an OpenAI-compatible upstream gets the decoders' parts as written.
    assert [list(part.to_chat()[part.to_chat()["type"]]) for part in PARTS[4:9:4]] == \
        [["url", "detail"], ["filename", "file_data", "file_id"]]


def test_a_message_content_goes_to_chat_and_each_part_comes_back():
    assert [part_from_chat(part) for part in content_to_chat(PARTS)] == PARTS
    assert content_to_chat("text") == "text" and content_to_chat(None) is None


@pytest.mark.parametrize(("chat", "read"), [
    ({"type": "image_url", "image_url": "https://x.test/a.png"}, ImagePart("https://x.test/a.png")),  # older form
    ({"type": "image_url", "image_url": {"url": "u", "detail": 1}}, ImagePart("u")),
    ({"type": "text", "text": 5}, TextPart("")), ({"type": "refusal"}, RefusalPart("")),
    ({"type": "file", "file": {"file_data": 5, "file_id": "f"}}, FilePart(file_id="f")),
    ({"type": "image_url", "image_url": {"url": 5}}, None), ({"type": "image_url"}, None),
    ({"type": "input_audio", "input_audio": {"data": B64}}, None),
    ({"type": "input_audio", "input_audio": {"data": B64, "format": ["wav"]}}, None),
    ({"type": "file", "file": {"filename": "a.pdf"}}, None), ({"type": "file", "file": "x"}, None),
    ({"type": "video"}, None), ("text", None)])
def test_what_a_chat_part_reads_as_and_what_cannot_be_read(chat, read):
    assert part_from_chat(chat) == read


# ---------------------------------------------------------------- Anthropic

@pytest.mark.parametrize(("block", "part"), [
    ({"type": "text", "text": "héllo"}, TextPart("héllo")),
    ({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": B64}}, ImagePart(PNG)),
    ({"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}}, ImagePart("https://x.test/a.png")),
    ({"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": B64}},
     FilePart(PDF, "document.pdf"))])
def test_an_anthropic_block_comes_in_as_a_part_and_goes_back_out(block, part):
    assert anthropic_messages.block_part(block) == part
    [message] = messages_turn({"role": "user", "content": [block]}, "messages.0", Translation())
    assert message == Message("user", [part])
    _, turns = anthropic_messages.conversation([message])
    assert turns == [{"role": "user", "content": [block]}]
    assert anthropic_messages.content_block(part, "messages.0.content.0") == block


def test_anthropic_documents_and_search_results_of_text_come_in_as_text_and_go_back_as_text_blocks():
    blocks = [{"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "doc"}},
              {"type": "search_result", "title": "T", "source": "https://s",
               "content": [{"type": "text", "text": "r"}]}]
    [message] = messages_turn({"role": "user", "content": blocks}, "messages.0", Translation())
    assert message == Message("user", [TextPart("doc"), TextPart("T https://s\nr")])
    assert anthropic_messages.conversation([message])[1][0]["content"] == \
        [{"type": "text", "text": "doc"}, {"type": "text", "text": "T https://s\nr"}]


def test_a_tool_results_images_follow_as_the_users_parts():
    result = {"type": "tool_result", "tool_use_id": "t1", "content": [
        {"type": "text", "text": "a"}, {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                    "data": B64}}]}
    assert messages_turn({"role": "user", "content": [result]}, "messages.0", Translation()) == [
        ToolResult("t1", "a"), Message("user", [ImagePart(PNG)])]


def test_what_only_anthropic_reads_is_refused_and_an_http_image_comes_in_but_cannot_go_back():
    notes = Translation()
    assert messages_turn({"role": "user", "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}},
                                                      {"type": "text", "text": "a"}]}, "messages.0", notes) == \
        [Message("user", [TextPart("a")])]
    assert notes.refusal.param == "messages.0.content.0.source"
    assert anthropic_messages.block_part({"type": "image", "source": {"type": "file", "file_id": "f"}}) is None
    [message] = messages_turn({"role": "user", "content": [{"type": "image", "source": {
        "type": "url", "url": "http://x.test/a.png"}}]}, "messages.0", Translation())
    assert refused(InvalidRequest, anthropic_messages.conversation, [message]) == (
        "messages.0.content.0.image_url.url: this model takes images by https URL or as a base64 data URL.",
        "messages.0.content.0.image_url.url")


def test_each_chat_part_written_to_anthropic():
    assert to_anthropic(TextPart("a"), TextPart(""), ImagePart("https://x.test/a.png", "high"), ImagePart(PNG),
                        FilePart(PDF, "a.pdf")) == [
        {"type": "text", "text": "a"}, {"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": B64}},
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": B64}}]
    system, turns = anthropic_messages.conversation([
        Message("system", [TextPart("s")]), Message("assistant", [TextPart("a"), RefusalPart("no")])])
    assert system == [{"type": "text", "text": "s"}]
    assert turns == [{"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "no"}]}]


@pytest.mark.parametrize(("chat", "kind", "message", "param"), [
    (AudioPart(B64, "wav").to_chat(), UnsupportedParameter,
     "messages.0.content.0: content parts of type 'input_audio' are not supported for this model.", "messages"),
    (FilePart(file_id="f").to_chat(), UnsupportedParameter,
     "messages.0.content.0: file parts by file_id are not supported for this model.", "messages"),
    (FilePart(f"data:text/plain;base64,{B64}").to_chat(), UnsupportedParameter,
     "messages.0.content.0: files of type text/plain are not supported for this model; PDF files are.", "messages"),
    (RefusalPart("no").to_chat(), UnsupportedParameter,
     "messages.0.content.0: content parts of type 'refusal' are not supported for this model.", "messages"),
    ({"type": "image_url", "image_url": {}}, InvalidRequest, "messages.0.content.0.image_url needs a url.",
     "messages.0.content.0.image_url"),
    (ImagePart("ftp://x").to_chat(), InvalidRequest, "messages.0.content.0.image_url.url must be an http(s) URL "
     "or a base64 data URL (data:TYPE;base64,…).", "messages.0.content.0.image_url.url")])
def test_what_anthropic_cannot_carry_is_refused(chat, kind, message, param):
    assert refused(kind, anthropic_messages.conversation,
                   conversation_from_chat([{"role": "user", "content": [chat]}])) == (message, param)


def test_anthropic_takes_only_text_in_a_system_or_assistant_message():
    assert refused(UnsupportedParameter, anthropic_messages.conversation, [
        Message("system", [ImagePart(PNG)]), Message("user", "q")]) == (
        "messages.0.content.0: content parts of type 'image_url' are not supported for this model.", "messages")


# ---------------------------------------------------------------- Gemini

@pytest.mark.parametrize(("part", "read"), [
    ({"text": "héllo"}, TextPart("héllo")), ({"inlineData": {"mimeType": "image/png", "data": B64}}, ImagePart(PNG)),
    ({"inlineData": {"mimeType": "application/pdf", "data": B64}}, FilePart(PDF, "document.pdf")),
    ({"inlineData": {"mimeType": "audio/wav", "data": B64}}, AudioPart(B64, "wav")),
    ({"inlineData": {"mimeType": "audio/mp3", "data": B64}}, AudioPart(B64, "mp3"))])
def test_a_gemini_part_comes_in_as_a_part_and_goes_back_out(part, read):
    found = GeminiRequest(params={})
    [message] = gemini_turn({"role": "user", "parts": [part, {"text": "x"}]}, "contents.0", CallIds(), found)
    assert message == {"role": "user", "content": "héllo\nx" if read == TextPart("héllo") else
                       [read.to_chat(), TextPart("x").to_chat()]}
    _, contents = gemini_messages.conversation([message], fetched)
    assert contents[0]["parts"] in ([part, {"text": "x"}], [{"text": "héllo\nx"}])
    assert gemini_messages.gemini_part(read, "messages.0.content.0") == part and not found.native_only


@pytest.mark.parametrize(("mime", "back"), [("audio/x-wav", "audio/wav"), ("audio/mpeg", "audio/mp3")])
def test_gemini_audio_types_that_fold_into_one_format_go_back_as_its_type(mime, back):
    read = gemini_messages.inline_part(mime, B64)
    assert gemini_messages.gemini_part(read, "m") == {"inlineData": {"mimeType": back, "data": B64}}


def test_a_gemini_image_by_url_comes_in_as_its_url_and_goes_back_fetched():
    [message] = gemini_turn({"parts": [{"fileData": {"fileUri": "https://x.test/a.png", "mimeType": "image/png"}}]},
                            "contents.0", CallIds(), GeminiRequest(params={}))
    assert message["content"] == [ImagePart("https://x.test/a.png").to_chat()]
    assert gemini_messages.conversation([message], fetched)[1][0]["parts"] == [
        {"fetched": "https://x.test/a.png", "where": "messages.0.content.0.image_url.url"}]


@pytest.mark.parametrize("part", [{"inlineData": {"mimeType": "video/mp4", "data": B64}},
                                  {"fileData": {"fileUri": "gs://b/a.png", "mimeType": "image/png"}},
                                  {"fileData": {"fileUri": "https://x.test/a.pdf", "mimeType": "application/pdf"}}])
def test_what_only_gemini_reads_is_named_and_left_out(part):
    found = GeminiRequest(params={})
    assert gemini_turn({"parts": [part]}, "contents.0", CallIds(), found) == []
    assert list(found.native_only) == [f"contents.0.parts.0.{next(iter(part))}"]


def test_each_chat_part_written_to_gemini():
    assert to_gemini(TextPart("a"), TextPart(""), ImagePart(PNG), ImagePart("https://x.test/a.png"),
                     AudioPart(B64, "mp3"), FilePart(PDF, "a.pdf")) == [
        {"text": "a"}, {"inlineData": {"mimeType": "image/png", "data": B64}},
        {"fetched": "https://x.test/a.png", "where": "messages.0.content.3.image_url.url"},
        {"inlineData": {"mimeType": "audio/mp3", "data": B64}},
        {"inlineData": {"mimeType": "application/pdf", "data": B64}}]
    system, contents = gemini_messages.conversation([
        {"role": "system", "content": [TextPart("s").to_chat()]},
        {"role": "assistant", "content": [TextPart("a").to_chat(), RefusalPart("no").to_chat()]}], fetched)
    assert (system, contents) == ([{"text": "s"}], [{"role": "model", "parts": [{"text": "a"}, {"text": "no"}]}])


AUDIO_REFUSED = ("messages.0.content.0.input_audio needs base64 data and a format of wav or mp3.",
                 "messages.0.content.0.input_audio")


@pytest.mark.parametrize(("chat", "kind", "refusal"), [
    (AudioPart(B64, "flac").to_chat(), InvalidRequest, AUDIO_REFUSED),
    ({"type": "input_audio", "input_audio": {"data": B64}}, InvalidRequest, AUDIO_REFUSED),
    # A format that is not a string is this 400 too, where it was an unhandled error.
    ({"type": "input_audio", "input_audio": {"data": B64, "format": ["wav"]}}, InvalidRequest, AUDIO_REFUSED),
    (FilePart(file_id="f").to_chat(), UnsupportedParameter,
     ("messages.0.content.0: file parts by file_id are not supported for this model.", "messages")),
    (RefusalPart("no").to_chat(), UnsupportedParameter,
     ("messages.0.content.0: content parts of type 'refusal' are not supported for this model.", "messages")),
    ({"type": "image_url", "image_url": 5}, InvalidRequest,
     ("messages.0.content.0.image_url needs a url.", "messages.0.content.0.image_url"))])
def test_what_gemini_cannot_carry_is_refused(chat, kind, refusal):
    assert refused(kind, gemini_messages.conversation, [{"role": "user", "content": [chat]}], fetched) == refusal


def test_responses_content_parts_read_into_the_neutral_parts_and_what_chat_cannot_carry_is_none():
    from gateway.responses.chat_request import input_part

    def read(part, text_only=False):
        return input_part(part, "input.0.content.0", text_only)

    assert read({"type": "input_text", "text": "hi"}) == TextPart("hi")
    assert read({"type": "refusal", "refusal": "no"}) == TextPart("no")  # chat's request has no refusal part
    assert read({"type": "input_image", "image_url": PNG, "detail": "high"}) == ImagePart(PNG, "high")
    assert read({"type": "input_image", "image_url": PNG, "detail": "huge"}) == ImagePart(PNG)
    assert read({"type": "input_file", "file_data": PDF}) == FilePart(PDF, "file.pdf")
    assert read({"type": "input_file", "file_data": PDF, "filename": "a.pdf"}).to_chat() == {
        "type": "file", "file": {"filename": "a.pdf", "file_data": PDF}}
    # By an uploaded file's id, of a newer type, or where only text may be (a tool's output): not carried.
    for part in ({"type": "input_image", "file_id": "file-1"}, {"type": "input_file", "file_id": "file-1"},
                 {"type": "input_audio", "input_audio": {}}):
        assert read(part) is None
    assert read({"type": "input_image", "image_url": PNG}, text_only=True) is None
    assert refused(InvalidRequest, read, {"type": "input_text", "text": 3}) == (
        "input.0.content.0.text: must be a string.", "input.0.content.0.text")
