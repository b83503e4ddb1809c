"""Gemini's answers as OpenAI-shaped ones: a GenerateContentResponse as a chat completion, its stream as
chunks, its finish reasons, usageMetadata and functionCall parts beside their reverse (gateway.gemini_api
answers with these), a request's earlier functionCall and functionResponse parts (gateway.gemini_api reads
them, gateway.upstream.gemini_messages writes them), a blocked prompt, log probabilities, and
batchEmbedContents' answer as a list of embeddings."""
import base64
import json
import math
import struct
import time
import uuid
from dataclasses import replace
from typing import Any

from gateway.conversation import Delta, StopReason, StreamPiece, ToolCall, ToolCallDelta, Usage
from gateway.conversation_request import Message, ToolResult
from gateway.upstream.shapes import Malformed, tokens_reported, tool_call_id
from utils_app.errors import UpstreamRejected

# Where Gemini 3 models keep the signature they need back with a function call; the key Google's own
# OpenAI-compatible endpoint uses, so clients written for it keep working.
SIGNATURE_KEY = "google"
# Gemini's finish reasons as the neutral stop reasons, and the neutral ones as Gemini's (gateway.gemini_api
# answers with these). Gemini has no reason for a tool call: a turn that calls a function ends with STOP, and
# reads back as tool_calls because it calls one. Any reason not named here reads as stop.
FINISH_REASONS = {"STOP": StopReason.STOP, "MAX_TOKENS": StopReason.LENGTH}
# Gemini's reasons for withholding output: the neutral content_filter (which goes out as SAFETY).
FILTERED = {"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY", "LANGUAGE",
            "IMAGE_PROHIBITED_CONTENT", "IMAGE_RECITATION"}
GOOGLE_REASONS = {StopReason.STOP: "STOP", StopReason.LENGTH: "MAX_TOKENS", StopReason.CONTENT_FILTER: "SAFETY",
                  StopReason.TOOL_CALLS: "STOP", StopReason.FUNCTION_CALL: "STOP"}


def finish_reason(reason: Any, called: bool) -> str | None:
    """Gemini's finish reason as a chat answer's (``google_finish_reason`` is its reverse)."""
    if called:
        return StopReason.TOOL_CALLS.value  # an answer that calls a function, whatever Gemini's reason
    if not reason:
        return None
    if not isinstance(reason, str):  # read as a reason Google added after this was written: a stop
        return StopReason.STOP.value
    return (StopReason.CONTENT_FILTER if reason in FILTERED else FINISH_REASONS.get(reason, StopReason.STOP)).value


def google_finish_reason(finish: StopReason | None) -> str:
    """A chat answer's finish reason as Gemini's (``finish_reason`` is its reverse); none said is a stop."""
    return GOOGLE_REASONS[finish or StopReason.STOP]


def usage(meta: Any) -> Usage:
    """Gemini's usageMetadata as the neutral counts (``usage_metadata`` is its reverse). The input counts
    every input token: the prompt (cached part included) and what built-in tools fed back; the output counts
    the thinking tokens too, as OpenAI counts reasoning tokens and as Google bills them (at the output
    price). Google leaves out a count of 0: one left out reads as 0."""
    if not isinstance(meta, dict):
        return Usage()
    # One sent but unusable (negative, fractional) leaves its total unknown, and the gateway's estimate is
    # metered instead (docs/hardening.md); the metering clamps what is left.
    prompt, tools, thoughts, candidates, cached = (tokens_reported(meta, name) for name in (
        "promptTokenCount", "toolUsePromptTokenCount", "thoughtsTokenCount", "candidatesTokenCount",
        "cachedContentTokenCount"))
    return Usage(input_tokens=prompt + tools if prompt is not None and tools is not None else None,
                 output_tokens=candidates + thoughts if candidates is not None and thoughts is not None else None,
                 cached_tokens=cached, reasoning_tokens=thoughts)


def usage_metadata(counted: Usage) -> dict[str, Any]:
    """The neutral counts as Google's usageMetadata (``usage`` is its reverse), a count not known as 0:
    thinking tokens apart from the answer's, as Google counts them (and both billed as output, as the ledger
    keeps them); a cached or thinking count of 0 left out, as Google leaves it out."""
    input_tokens, output_tokens = counted.input_tokens or 0, counted.output_tokens or 0
    reasoning = min(counted.reasoning_tokens or 0, output_tokens)
    meta = {"promptTokenCount": input_tokens, "candidatesTokenCount": output_tokens - reasoning,
            "totalTokenCount": input_tokens + output_tokens}
    if counted.cached_tokens:
        meta["cachedContentTokenCount"] = counted.cached_tokens
    if reasoning:
        meta["thoughtsTokenCount"] = reasoning
    return meta


def tool_call(call: Any, malformed: Malformed) -> ToolCall:
    """A functionCall as the neutral tool call (``function_call_part`` is its reverse): an id left out or
    empty is made up (a chat tool call always has one; Gemini before 3 sends none), args left out or empty
    read as {}; a name that is not a string or args that are not an object are a malformed answer."""
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        raise malformed("function call")
    args = call.get("args") or {}
    if not isinstance(args, dict):
        raise malformed("function call")
    return ToolCall(id=call["id"] if isinstance(call.get("id"), str) and call["id"] else tool_call_id(),
                    name=call["name"], arguments=json.dumps(args, ensure_ascii=False))


def function_call_part(call: ToolCall, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
    """The neutral tool call as a functionCall part (``tool_call`` is its reverse): args are the arguments'
    object ({} when they are empty, do not parse or are not an object), or ``arguments`` when the caller has
    parsed them already; an id not given is left out, as Gemini leaves it out, not made up."""
    found: dict[str, Any] = {"name": call.name, "args": call.arguments_object() if arguments is None else arguments}
    if call.id:
        found["id"] = call.id
    return {"functionCall": found}


def request_function_call_part(call: ToolCall, arguments: dict[str, Any]) -> dict[str, Any]:
    """An earlier turn's tool call as the functionCall part a request sends back: ``function_call_part``'s
    without the id, as the functionResponse part answering it goes without one (Google pairs the two by
    name and position), and with the thought signature Gemini gave the call, which its extra_content
    carries under SIGNATURE_KEY as ``read_parts`` put it there: a Gemini 3 model wants it back."""
    part = function_call_part(replace(call, id=""), arguments)
    extra = call.extra_content
    ours = extra.get(SIGNATURE_KEY) if isinstance(extra, dict) else None
    signature = ours.get("thought_signature") if isinstance(ours, dict) else None  # no other shape is Gemini's
    if isinstance(signature, str) and signature:
        part["thoughtSignature"] = signature
    return part


def tool_result(response: dict[str, Any], call_id: str) -> ToolResult:
    """A functionResponse as the neutral result of the call ``call_id`` (the decoder pairs it with its call:
    gateway.gemini_api.contents). ``function_response_part`` is its reverse: a response that is a string is
    the content as it is, anything else its JSON text."""
    output = response.get("response")
    return ToolResult(call_id=call_id,
                      content=output if isinstance(output, str) else json.dumps(output, ensure_ascii=False))


def function_response_part(name: str, result: ToolResult) -> dict[str, Any]:
    """The neutral tool result as a functionResponse part answering the function ``name`` (``tool_result``
    is its reverse), without an id, as its call's part: content that is a JSON object's text is the response
    as that object, anything else goes under "output" (the key Gemini's documentation names for a
    function's output)."""
    try:
        value = json.loads(result.content)
    except ValueError:
        value = None
    return {"functionResponse": {"name": name,
                                 "response": value if isinstance(value, dict) else {"output": result.content}}}


def read_parts(candidate: dict[str, Any], malformed: Malformed) -> tuple[list[str], list[ToolCall]]:
    """The answer's text pieces and function calls, each call with its thought signature as its
    extra_content, under SIGNATURE_KEY as Gemini sent it (else none); thought summaries left out."""
    content = candidate.get("content") or {}
    parts = content.get("parts") if isinstance(content, dict) else None
    if parts is None:
        return [], []
    if not isinstance(parts, list):
        raise malformed("response")
    texts, calls = [], []
    for part in parts:
        if not isinstance(part, dict):
            raise malformed("response")
        if isinstance(part.get("text"), str) and not part.get("thought"):
            texts.append(part["text"])
        elif "functionCall" in part:
            signature = part.get("thoughtSignature")
            calls.append(replace(tool_call(part["functionCall"], malformed), extra_content={
                SIGNATURE_KEY: {"thought_signature": signature}} if isinstance(signature, str) else None))
    return texts, calls


def blocked(body: dict[str, Any]) -> UpstreamRejected | None:
    """A prompt Gemini refused to answer (promptFeedback.blockReason, no candidates): the request's fault,
    answered as Azure OpenAI answers a filtered prompt (400 content_filter), not retried elsewhere."""
    feedback = body.get("promptFeedback")
    reason = feedback.get("blockReason") if isinstance(feedback, dict) else None
    if not reason or body.get("candidates"):
        return None
    return UpstreamRejected(f"The prompt was blocked by the upstream's content filter ({reason}).", status=400,
                            code="content_filter", param="messages")


def _candidates(body: dict[str, Any], malformed: Malformed) -> list[dict[str, Any]]:
    candidates = body.get("candidates") or []
    if not isinstance(candidates, list) or not all(isinstance(candidate, dict) for candidate in candidates):
        raise malformed("response")
    return candidates


def logprobs(candidate: dict[str, Any]) -> dict[str, Any] | None:
    """Gemini's logprobsResult as OpenAI's choice logprobs (content tokens with their top alternatives)."""
    result = candidate.get("logprobsResult")
    if not isinstance(result, dict):
        return None
    chosen = result.get("chosenCandidates")
    if not isinstance(chosen, list):
        chosen = []
    tops = result.get("topCandidates")
    if not isinstance(tops, list):
        tops = []

    def token(entry: dict[str, Any]) -> dict[str, Any]:
        text = entry.get("token")
        if not isinstance(text, str):
            text = ""
        value = entry.get("logProbability")
        return {"token": text, "logprob": float(value) if isinstance(value, (int, float)) else 0.0,
                "bytes": list(text.encode())}

    content = []
    for index, entry in enumerate(item for item in chosen if isinstance(item, dict)):
        top = tops[index].get("candidates") if index < len(tops) and isinstance(tops[index], dict) else None
        content.append({**token(entry), "top_logprobs": [token(alternative) for alternative in top or ()
                                                         if isinstance(alternative, dict)]})
    return {"content": content, "refusal": None}


def completion(body: dict[str, Any], *, model: str, malformed: Malformed) -> dict[str, Any]:
    rejected = blocked(body)
    if rejected:
        raise rejected
    candidates = _candidates(body, malformed)
    if not candidates:
        raise malformed("response (no candidates)")
    choices = []
    for position, candidate in enumerate(candidates):
        texts, calls = read_parts(candidate, malformed)
        message = Message("assistant", "".join(texts) if texts else None, tuple(calls))
        index = candidate.get("index")
        choices.append({"index": index if type(index) is int else position, "message": message.to_chat(),
                        "logprobs": logprobs(candidate),
                        "finish_reason": finish_reason(candidate.get("finishReason") or "STOP", bool(calls))})
    answer = {"id": completion_id(body), "object": "chat.completion", "created": int(time.time()), "model": model,
              "choices": choices}
    counted = usage(body.get("usageMetadata")).to_chat()
    if counted:
        answer["usage"] = counted
    return answer


def completion_id(body: dict[str, Any]) -> str:
    response_id = body.get("responseId")
    return f"chatcmpl-{response_id}" if isinstance(response_id, str) and response_id else \
        f"chatcmpl-{uuid.uuid4().hex[:24]}"


class StreamTranslation:
    """Gemini's stream events, each a GenerateContentResponse with the next piece of each candidate, as
    chat.completion.chunk objects: one chunk per event, as it arrives. A function call arrives whole in
    one event and becomes one tool call delta, its arguments complete."""

    def __init__(self, *, model: str, candidates: int):
        self.model = model
        self.expected = candidates
        self.id = ""
        self.created = int(time.time())
        self.usage: Usage | None = None  # the last usageMetadata that knew a count
        self.opened: set[int] = set()  # choices whose first chunk (with the role) was sent
        self.calls: dict[int, int] = {}  # choice -> tool calls sent so far (the next call's index)
        self.finished: set[int] = set()

    @property
    def finished_any(self) -> bool:
        return bool(self.finished)

    @property
    def done(self) -> bool:
        return len(self.finished) >= self.expected

    def translate(self, event: dict[str, Any], *, malformed: Malformed) -> dict[str, Any] | None:
        rejected = blocked(event)
        if rejected:
            raise rejected
        self.id = self.id or completion_id(event)
        counted = usage(event.get("usageMetadata"))
        if counted.to_chat():
            self.usage = counted
        choices = []
        for position, candidate in enumerate(_candidates(event, malformed)):
            index = candidate.get("index")
            if type(index) is not int:
                index = position
            texts, calls = read_parts(candidate, malformed)
            text = "".join(texts)
            first = self.calls.get(index, 0)
            pieces = tuple(ToolCallDelta(first + offset, call.id, call.name, call.arguments, call.extra_content)
                           for offset, call in enumerate(calls))
            if calls:
                self.calls[index] = first + len(calls)
            reason = candidate.get("finishReason")
            finish = finish_reason(reason, index in self.calls) if reason else None
            if not (text or pieces) and finish is None:
                continue  # nothing to say yet (an empty text or a thought summary)
            choices.append(Delta(index, None if index in self.opened else "assistant", text or None,
                                 pieces, StopReason(finish) if finish else None, logprobs(candidate)))
            self.opened.add(index)
            if finish:
                self.finished.add(index)
        return self.piece(choices) if choices else None

    def piece(self, choices: list[Delta]) -> dict[str, Any]:
        """A chunk of these choices' pieces (none: one that carries only what the stream passes beside it)."""
        return StreamPiece(tuple(choices), id=self.id, model=self.model, created=self.created).to_chunk()

    def usage_chunk(self) -> dict[str, Any]:
        return StreamPiece(usage=self.usage, id=self.id, model=self.model, created=self.created).to_chunk()


# ---------------------------------------------------------------- embeddings

def embedding_list(body: dict[str, Any], *, model: str, normalise: bool, base64_encoded: bool,
                   malformed: Malformed) -> dict[str, Any]:
    """batchEmbedContents' answer as OpenAI's list of embeddings.

    With ``dimensions`` Gemini cuts its vector short without scaling it back to length 1,
    which OpenAI's embeddings always have (clients compare them with a dot product): such
    vectors are normalised here. base64 is OpenAI's: little-endian float32.
    """
    embeddings = body.get("embeddings")
    if not isinstance(embeddings, list):
        raise malformed("list of embeddings")
    data = []
    for index, item in enumerate(embeddings):
        values = item.get("values") if isinstance(item, dict) else None
        if not isinstance(values, list) or not all(type(v) in (int, float) for v in values):
            raise malformed("list of embeddings")
        if normalise:
            length = math.sqrt(sum(value * value for value in values))
            values = [value / length for value in values] if length else values
        vector = base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode("ascii") if base64_encoded \
            else [float(value) for value in values]
        data.append({"object": "embedding", "index": index, "embedding": vector})
    answer: dict[str, Any] = {"object": "list", "data": data, "model": model}
    meta = body.get("usageMetadata")
    tokens = meta.get("promptTokenCount") if isinstance(meta, dict) else None
    if type(tokens) is int and tokens >= 0:
        answer["usage"] = {"prompt_tokens": tokens, "total_tokens": tokens}
    return answer
