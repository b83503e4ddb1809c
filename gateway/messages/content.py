"""The conversation of a Messages request as the gateway's typed turns (gateway.conversation_request), which
the decoder writes as chat's messages: the system prompt, each turn, and its content blocks (text, images,
documents, search results, tool uses and their results)."""
from gateway.conversation_request import Message, Part, TextPart, ToolResult, Turn
from gateway.messages.translation import Translation, need
from gateway.upstream.anthropic_answer import tool_call
from gateway.upstream.anthropic_messages import block_part
from utils_app.errors import InvalidRequest


def system_prompt(system, where: str, notes: Translation) -> str | list[Part]:
    """The system prompt (or a system message's content): a string, or its text blocks as text parts."""
    if isinstance(system, str):
        return system
    need(isinstance(system, list), where, "must be a string or an array of text blocks.")
    parts: list[Part] = []
    for index, block in enumerate(system):
        at = f"{where}.{index}"
        need(isinstance(block, dict) and isinstance(block.get("type"), str), at, "must be a content block.")
        if block["type"] != "text":
            notes.drop(at)  # a system prompt is text; Anthropic takes nothing else there either
            continue
        need(isinstance(block.get("text"), str), f"{at}.text", "must be a string.")
        notes.extras(block, ("type", "text", "citations"), at)
        parts.append(TextPart(block["text"]))
    return parts


def turn_messages(message, where: str, notes: Translation) -> list[Turn]:
    """One Anthropic message as the conversation's turns: a system message in place (Claude Code's reminders in
    mid-conversation), a user turn's tool results as tool messages (first, as they stand first in the turn),
    an assistant turn's tool_use blocks as its tool calls."""
    need(isinstance(message, dict), where, "must be an object with role and content.")
    role, content = message.get("role"), message.get("content")
    need(role in ("user", "assistant", "system"), f"{where}.role", "must be 'user', 'assistant' or 'system'.")
    if role == "system":
        need(content is not None, f"{where}.content", "is required.")
        text = system_prompt(content, f"{where}.content", notes)
        return [Message("system", text)] if text else []
    if isinstance(content, str):
        return [Message(role, content)]
    need(isinstance(content, list) and bool(content), f"{where}.content",
          "must be a string or a non-empty array of content blocks.")
    blocks = []
    for index, block in enumerate(content):
        need(isinstance(block, dict) and isinstance(block.get("type"), str), f"{where}.content.{index}",
              "must be a content block with a type.")
        blocks.append((block, f"{where}.content.{index}"))
    return _user(blocks, notes) if role == "user" else _assistant(blocks, notes)


def _user(blocks: list, notes: Translation) -> list[Turn]:
    results: list[Turn] = []
    parts: list[Part] = []
    for block, where in blocks:
        kind = block["type"]
        if kind == "tool_result":
            need(isinstance(block.get("tool_use_id"), str) and bool(block["tool_use_id"]), f"{where}.tool_use_id",
                  "is required.")
            notes.extras(block, ("type", "tool_use_id", "content", "is_error"), where)
            text, images = _result(block.get("content"), f"{where}.content", notes)
            if block.get("is_error"):
                text = f"Error: {text}"
            results.append(ToolResult(call_id=block["tool_use_id"], content=text))
            parts.extend(images)  # a tool message is text: the images it returned follow as the user's
        elif kind in ("text", "image", "document", "search_result"):
            parts.extend(_part(block, where, notes))
        else:
            notes.drop(where)  # an Anthropic-only block (a container upload, say): the turn goes on without it
    return results + ([Message("user", parts)] if parts else [])


def _part(block: dict, where: str, notes: Translation) -> list[Part]:
    """A text, image, document or search result block as content parts (anthropic_messages.block_part, once
    checked here)."""
    kind = block["type"]
    if kind == "text":
        need(isinstance(block.get("text"), str), f"{where}.text", "must be a string.")
        notes.extras(block, ("type", "text", "citations"), where)
        return _read(block)
    if kind == "image":
        notes.extras(block, ("type", "source"), where)
        return _read(block) if _image_source(block.get("source"), where, notes) else []
    if kind == "search_result":
        notes.extras(block, ("type", "source", "title", "content", "citations"), where)
        texts, _ = _result(block.get("content"), f"{where}.content", notes)
        heading = " ".join(str(block[name]) for name in ("title", "source") if isinstance(block.get(name), str))
        return [TextPart(f"{heading}\n{texts}" if heading else texts)]
    notes.extras(block, ("type", "source", "title", "context", "citations"), where)
    source: dict = block["source"] if isinstance(block.get("source"), dict) else {}
    if source.get("type") == "text":  # a plain-text document is its text
        need(isinstance(source.get("data"), str), f"{where}.source.data", "must be a string.")
        return _read(block)
    if source.get("type") == "content":
        text, _ = _result(source.get("content"), f"{where}.source.content", notes)
        return [TextPart(text)]
    if source.get("type") != "base64" or source.get("media_type") != "application/pdf":
        notes.refuse(where, "documents reach this model as text, content or base64 PDF sources only.")
        return []
    need(isinstance(source.get("data"), str), f"{where}.source.data", "must be a base64 string.")
    return _read(block)


def _read(block: dict) -> list[Part]:
    part = block_part(block)
    return [part] if part is not None else []


def _result(content, where: str, notes: Translation) -> tuple[str, list[Part]]:
    """A tool result's (or a search result's) content: (its text, the image parts it holds)."""
    if content is None or isinstance(content, str):
        return content or "", []
    need(isinstance(content, list), where, "must be a string or an array of content blocks.")
    texts: list[str] = []
    images: list[Part] = []
    for index, block in enumerate(content):
        at = f"{where}.{index}"
        need(isinstance(block, dict) and isinstance(block.get("type"), str), at, "must be a content block.")
        if block["type"] in ("text", "document", "search_result"):
            texts.extend(part.text for part in _part(block, at, notes) if isinstance(part, TextPart))
        elif block["type"] == "image":
            images.extend(_part(block, at, notes))
        else:
            notes.drop(at)  # a tool reference of Anthropic's tool search, say
    return "\n".join(texts), images


def _image_source(source, where: str, notes: Translation) -> bool:
    """Whether an image's source is one other wires read (base64 or url), checked; a source only Anthropic
    reads (a file id) is not, refused for the other types."""
    need(isinstance(source, dict), f"{where}.source", "must be an object.")
    if source.get("type") == "base64":
        need(isinstance(source.get("media_type"), str) and isinstance(source.get("data"), str),
              f"{where}.source", "a base64 source needs media_type and data.")
        return True
    if source.get("type") == "url":
        need(isinstance(source.get("url"), str), f"{where}.source.url", "must be a string.")
        return True
    notes.refuse(f"{where}.source", "images reach this model as base64 or url sources only.")
    return False


def _assistant(blocks: list, notes: Translation) -> list[Turn]:
    texts, calls = [], []
    for block, where in blocks:
        kind = block["type"]
        if kind == "text":
            need(isinstance(block.get("text"), str), f"{where}.text", "must be a string.")
            notes.extras(block, ("type", "text", "citations"), where)
            texts.append(block["text"])
        elif kind == "tool_use":
            need(isinstance(block.get("name"), str) and bool(block["name"]), f"{where}.name", "is required.")
            notes.extras(block, ("type", "id", "name", "input", "caller"), where)
            # The answers' reader: an id left out is made up; an input that is not an object is refused.
            calls.append(tool_call(block, lambda _: InvalidRequest(f"{where}.input: must be an object.",
                                                                   param=f"{where}.input")))
        else:
            # An earlier turn's reasoning (with its signature) or a server tool's work: Anthropic's alone. The
            # answer it led to is what the next turn needs.
            notes.drop(where)
    return [Message("assistant", "".join(texts) if texts or not calls else None, tuple(calls))]
