"""What every adapter hands back, whatever its protocol: OpenAI-shaped answers and these few types."""
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from utils_app.errors import UpstreamError


@dataclass(frozen=True)
class Image:
    content: bytes
    content_type: str
    revised_prompt: str | None = None


@dataclass(frozen=True)
class Audio:
    content: bytes
    content_type: str
    format: str  # the file format of ``content``, used as the stored file's extension


class ChunkStream:
    """Chat chunks (OpenAI's chat.completion.chunk objects), received up to the stream's commit point
    before the gateway answers.

    The commit point is the first chunk that carries content, a tool call or a finish
    reason. Until then (an opening chunk with only the role, say) nothing has reached the
    client, so an upstream that fails early (refused, down, silent, or breaking off right
    after its first chunk) still gets an ordinary JSON error, a refund and the next
    deployment, instead of a broken 200 stream. After it the client has output, and the
    stream is charged however it ends (CONTRACT section 5).
    """

    def __init__(self, chunks: Iterator[dict], close: Callable[[], None]):
        self._chunks = chunks
        self._close = close
        self._held: list[dict] = []
        try:
            for chunk in chunks:
                self._held.append(chunk)
                if commits(chunk):
                    return
        except BaseException:
            close()
            raise
        close()
        raise UpstreamError("The upstream ended the stream without sending any content.")

    def __iter__(self) -> Iterator[dict]:
        yield from self._held
        self._held = []
        yield from self._chunks

    def close(self) -> None:
        self._close()


def commits(chunk: dict) -> bool:
    """Whether a chat chunk carries output: content, a tool call, a refusal or a finish reason."""
    for choice in chunk.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        if choice.get("finish_reason"):
            return True
        delta = choice.get("delta")
        if isinstance(delta, dict) and (delta.get("content") or delta.get("tool_calls") or delta.get("refusal")
                                        or delta.get("function_call")):
            return True
    return False


def content_text(content) -> str:
    """The text of a message's content: a string, or the text parts of an array."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(part["text"] for part in content if isinstance(part, dict) and isinstance(part.get("text"), str))
    return ""


def prompt_text(messages: list[dict]) -> str:
    """All the text of a conversation, for token estimates."""
    return "\n".join(content_text(message.get("content")) for message in messages)
