"""OpenAI-shaped chat messages, read as the conversation's turns, as Anthropic's system prompt and messages
(text, images and PDF files as content blocks, tool calls and their results as tool_use and tool_result
blocks), and Anthropic's content blocks read back as the conversation's parts: each way in this module, as
gateway.upstream.gemini_messages does for Gemini. gateway.upstream.anthropic_request writes the rest of the
request."""
import re
from dataclasses import replace
from typing import Any

from gateway.conversation_request import (
    Content,
    FilePart,
    ImagePart,
    Part,
    RefusalPart,
    TextPart,
    ToolResult,
    Turn,
)
from gateway.upstream.anthropic_answer import tool_use
from gateway.upstream.shapes import call_arguments, checked_user_part, data_url, part_unsupported, tool_call_id
from utils_app.errors import InvalidRequest, UnsupportedParameter

TOOL_ID_REFUSED = re.compile(r"[^A-Za-z0-9_-]")


def tool_id(value: Any) -> str:
    """A client's tool call id as Anthropic takes one (letters, digits, _ and -)."""
    return TOOL_ID_REFUSED.sub("_", value) if isinstance(value, str) and value else tool_call_id()


def tool_result(result: ToolResult) -> dict[str, Any]:
    """A tool's result as a tool_result block, its call's id made one Anthropic takes (``tool_id``, as the
    tool_use block it answers is given the same); empty content is left out, as Anthropic takes it."""
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_id(result.call_id)}
    if result.content:
        block["content"] = result.content
    return block


def conversation(turns: list[Turn]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(system blocks, messages) for the conversation's turns (read from chat's once, conversation_from_chat).
    System and developer messages become the system prompt, wherever they stand (one in mid-conversation is
    folded into it: the form every release of Anthropic's API takes; a Messages client's own system turns
    reach an anthropic deployment as they came, gateway.messages); an assistant's tool calls become tool_use
    blocks and tool results tool_result blocks, the results in a row joined into one user turn; turns of one
    role in a row are merged (Anthropic's turns alternate)."""
    system: list[dict[str, Any]] = []
    messages: list[dict[str, Any]] = []
    for index, turn in enumerate(turns):
        where = f"messages.{index}"
        if isinstance(turn, ToolResult):
            if not turn.call_id:
                raise InvalidRequest(f"{where}.tool_call_id is required.", param=f"{where}.tool_call_id")
            _add(messages, "user", [tool_result(turn)])
        elif turn.role in ("system", "developer"):
            system.extend(_blocks(turn.content, where))
        elif turn.role == "assistant":
            blocks = _blocks(turn.content, where)
            # The answers' tool_use blocks, each id made one Anthropic takes, as its result's is (tool_id).
            blocks.extend(tool_use(replace(call, id=tool_id(call.id)), arguments)
                          for call, arguments in call_arguments(turn, where))
            _add(messages, "assistant", blocks)
        else:
            _add(messages, "user", _blocks(turn.content, where, user=True))
    if not messages:
        raise InvalidRequest("messages needs at least one user or assistant message besides the system prompt.",
                             param="messages")
    return system, messages


def _add(turns: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    if not blocks:
        return  # an empty turn (an assistant message with empty content): Anthropic refuses one
    if turns and turns[-1]["role"] == role:
        previous = turns[-1]["content"]
        if blocks[0]["type"] == "tool_result":
            # Tool results lead their user turn, as Anthropic requires: after the results already there.
            at = sum(1 for block in previous if block["type"] == "tool_result")
            previous[at:at] = blocks
        else:
            previous.extend(blocks)
    else:
        turns.append({"role": role, "content": blocks})


# -- content: Anthropic's blocks and the conversation's parts, each way

def block_part(block: dict[str, Any]) -> Part | None:
    """An Anthropic content block as a content part (``content_block`` is its reverse), once its decoder
    (gateway.messages.content) has checked it: text; an image, its base64 source as a data URL, its url
    source as the URL; a document of plain text as its text, a base64 PDF as a file named document.pdf.
    None for a block no other wire carries (an image by a file id, a document of another source)."""
    kind = block.get("type")
    source: dict[str, Any] = block["source"] if isinstance(block.get("source"), dict) else {}
    if kind == "text":
        return TextPart(block["text"])
    if kind == "image" and source.get("type") == "base64":
        return ImagePart(f"data:{source['media_type']};base64,{source['data']}")
    if kind == "image" and source.get("type") == "url":
        return ImagePart(source["url"]) if source["url"] else None  # an empty URL is no image
    if kind == "document" and source.get("type") == "text":
        return TextPart(source["data"])
    if kind == "document" and source.get("type") == "base64" and source.get("media_type") == "application/pdf":
        return FilePart(f"data:application/pdf;base64,{source['data']}", "document.pdf")
    return None


def content_block(part: Part, where: str) -> dict[str, Any] | None:
    """A content part as an Anthropic block (``block_part`` is its reverse), ``where`` naming the part: text
    (a refusal too; None when empty), an image (``_source``), a PDF file as a base64 document. A file of
    another type is refused, and so are a file by its id and audio, which Anthropic does not take."""
    if isinstance(part, (TextPart, RefusalPart)):
        text = part.text if isinstance(part, TextPart) else part.refusal
        return {"type": "text", "text": text} if text else None
    if isinstance(part, ImagePart):
        return {"type": "image", "source": _source(part.url, f"{where}.image_url.url")}
    if isinstance(part, FilePart) and part.data is not None:
        media_type, data = data_url(part.data, f"{where}.file.file_data")
        if media_type != "application/pdf":
            raise UnsupportedParameter(f"{where}: files of type {media_type} are not supported for this model; "
                                       f"PDF files are.", param="messages")
        return {"type": "document", "source": {"type": "base64", "media_type": media_type, "data": data}}
    raise part_unsupported(part.to_chat(), where)


def _blocks(content: Content | None, where: str, *, user: bool = False) -> list[dict[str, Any]]:
    """A message's content as Anthropic's blocks: text (an earlier answer's refusal as text), and in a user's
    turn images and PDF files too. An empty text is left out; any other part is refused, naming it."""
    if not isinstance(content, list):
        return [{"type": "text", "text": content}] if content else []
    takes = (TextPart, ImagePart, FilePart) if user else (TextPart, RefusalPart)
    blocks = []
    for index, found in enumerate(content):
        at = f"{where}.content.{index}"
        part = checked_user_part(found, at) if user else found
        if not isinstance(part, takes):
            raise part_unsupported(part.to_chat(), at)
        block = content_block(part, at)
        if block is not None:
            blocks.append(block)
    return blocks


def _source(url: str, where: str) -> dict[str, Any]:
    """An image as Anthropic's source: a data URL's bytes inline, an https URL for Anthropic to fetch."""
    if url.startswith("https://"):
        return {"type": "url", "url": url}
    if url.startswith("http://"):
        raise InvalidRequest(f"{where}: this model takes images by https URL or as a base64 data URL.", param=where)
    media_type, data = data_url(url, where)
    return {"type": "base64", "media_type": media_type, "data": data}
