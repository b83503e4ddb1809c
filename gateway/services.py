"""The model operations: chat (and the APIs that speak it through a dialect), images, speech and
embeddings, and the replay of an Idempotency-Key retry. Each operation runs inside the metering pipeline
(gateway.pipeline ``metered``): it builds its upstream request, asks a deployment of the model's pool and
shapes the answer; a stream is relayed by gateway.relay."""
import base64
import json
import time

from gateway import idempotency, media, metering
from gateway.conversation import Choice
from gateway.output_serializers import ImageGenerationResult, SpeechResult
from gateway.tokens import count_tokens
from gateway.pipeline import Meter, Outcome, metered
from gateway.prices import Hold, cached_tokens, ledger_tokens, metered_usage, output_cap, prompt_tokens_held
from gateway.relay import ChatRelay, OpenAIEvents
from gateway.upstream.shapes import prompt_text
from keys.models import ApiKey
from utils_app.errors import UpstreamError


def previous_answer(*, request, key: ApiKey) -> Outcome | None:
    """The stored answer of an earlier request with this request's Idempotency-Key, if there is one."""
    claim = idempotency.from_request(request)
    found = idempotency.previous_answer(key=key, claim=claim) if claim else None
    if found is None:
        return None
    status, headers, body = found
    content_type = headers.pop("Content-Type", "application/json")
    if content_type.startswith("text/event-stream"):
        return Outcome(headers=headers, stream=iter([body]), status=status)
    return Outcome(headers=headers, content=body, content_type=content_type, status=status)


def _forwarded(params: dict, sent: set) -> dict:
    """The upstream request: the members the client named (each adapter sends it under its deployment's name)."""
    return {name: params[name] for name in sent if name in params}


# ---------------------------------------------------------------- chat

class ChatDialect:
    """The client's side of a chat: OpenAI's answer as it is, and OpenAI's events (the default)."""

    # The operation the ledger and usage rows name (an inbound API of its own may name itself there).
    records_as = "chat"

    def answer(self, completion: dict, *, input_tokens: int, output_tokens: int, cached: int) -> dict:
        """The answer's body; the token counts are the ones metered (the upstream's, else the estimates)."""
        if isinstance(completion.get("usage"), dict):
            completion["usage"] = metered_usage(completion["usage"], input_tokens=input_tokens,
                                                output_tokens=output_tokens, cached=cached)
        return completion

    def events(self) -> OpenAIEvents:
        return OpenAIEvents()

    def admitted(self, meter: Meter) -> None:
        """The request was charged and is about to be sent (the Responses API steers its routing here)."""

    def kept(self) -> metering.Also | None:
        """A row the answer's settlement also writes (the Responses API's stored response); none here."""
        return None

    def complete(self, client, payload: dict) -> dict:
        """One attempt at a deployment (``client`` its adapter): a chat.completion."""
        return client.chat(payload)

    def stream(self, client, payload: dict):
        """One attempt at a deployment: its chunks, up to the commit point."""
        return client.chat_stream(payload)


def chat_completion(*, request, key: ApiKey, params: dict, dialect: ChatDialect | None = None) -> Outcome:
    """POST /v1/chat/completions (and /v1/messages, through its dialect): a completion, or an event stream
    when ``stream`` is true. ``params`` are OpenAI's, validated."""
    dialect = dialect or ChatDialect()
    hold = Hold(input_tokens=lambda: prompt_tokens_held(params), output_cap=output_cap(params))
    with metered(request=request, key=key, operation="chat", model_id=params["model"],
                 units=params.get("n") or 1, record_as=dialect.records_as, hold=hold) as meter:
        dialect.admitted(meter)
        payload = dict(params)
        if params.get("stream"):
            client_wants_usage = bool((params.get("stream_options") or {}).get("include_usage"))
            # Always ask for the usage chunk: the tokens of a stream are recorded either way.
            payload["stream_options"] = {**(params.get("stream_options") or {}), "include_usage": True}
            chunks = meter.call(lambda client: dialect.stream(client, payload))
            relay = ChatRelay(meter=meter, upstream=chunks, include_usage=client_wants_usage,
                              messages=params["messages"], events=dialect.events())
            return Outcome(headers=meter.headers(), stream=relay)
        completion = meter.call(lambda client: dialect.complete(client, payload))
        completion["model"] = meter.model_name
        usage = completion.get("usage") or {}
        reply = " ".join(choice.text for choice in Choice.all_of(completion))
        input_tokens = ledger_tokens(usage, "prompt_tokens", lambda: count_tokens(prompt_text(params["messages"])))
        output_tokens = ledger_tokens(usage, "completion_tokens", lambda: count_tokens(reply))
        cached = min(cached_tokens(usage), input_tokens)  # part of the input, as the ledger keeps it
        cost = meter.price(input_tokens=input_tokens, output_tokens=output_tokens, cached_tokens=cached)
        # What it cost, in the usage the answer shows, whatever the model's pricing (CONTRACT section 12); a
        # dialect of another API copies it into its own.
        completion["usage"] = {**(usage if isinstance(usage, dict) else {}), "cost": cost}
        outcome = Outcome(headers=meter.headers(), body=dialect.answer(
            completion, input_tokens=input_tokens, output_tokens=output_tokens, cached=cached))
        meter.succeed(input_tokens=input_tokens, output_tokens=output_tokens, cached_tokens=cached, answer=outcome,
                      also=dialect.kept())
    return outcome


def estimate_chat_tokens(params: dict) -> int:
    """The gateway's own estimate of a chat request's input tokens (what usage falls back to), for a model its
    caller has resolved for the key: free, nothing is charged or sent upstream."""
    tools = params.get("tools")
    return count_tokens(prompt_text(params["messages"])) + (count_tokens(json.dumps(tools)) if tools else 0)


# ---------------------------------------------------------------- images

def generate_images(*, request, key: ApiKey, params: dict, sent: set) -> Outcome:
    """POST /v1/images/generations: ``cost * n`` credits; URLs point at this service's media."""
    with metered(request=request, key=key, operation="image", model_id=params["model"],
                 units=params["n"]) as meter:
        payload = _forwarded(params, sent)
        images = meter.call(lambda client: client.images(payload))[:params["n"]]
        meter.fee = meter.model.cost * len(images)  # cost * n held; an image not delivered is given back
        data = []
        for image in images:
            item: dict[str, str | None] = {"url": None, "b64_json": None}
            if params["response_format"] == "url":
                name = media.save(image.content, kind="images", extension=media.EXTENSIONS[image.content_type])
                item["url"] = media.url_for(name, request=request)
            else:
                item["b64_json"] = base64.b64encode(image.content).decode("ascii")
            if image.revised_prompt:
                item["revised_prompt"] = image.revised_prompt
            data.append(item)
        prompt_tokens = count_tokens(params["prompt"])
        meter.price(input_tokens=prompt_tokens, output_tokens=0)  # cost * n: what X-Credits-Charged says
        result = {"created": int(time.time()), "data": data, "remaining_credits": meter.balance()}
        outcome = Outcome(headers=meter.headers(), body=ImageGenerationResult(result).data)
        meter.succeed(input_tokens=prompt_tokens, output_tokens=0, answer=outcome)
    return outcome


# ---------------------------------------------------------------- speech

def synthesize_speech(*, request, key: ApiKey, params: dict, sent: set, raw: bool) -> Outcome:
    """POST /v1/audio/speech: the audio bytes when ``raw``, else JSON with the stored file's URL."""
    with metered(request=request, key=key, operation="speech", model_id=params["model"]) as meter:
        payload = _forwarded(params, sent)
        audio = meter.call(lambda client: client.speech(payload))
        input_tokens = count_tokens(params["input"])
        meter.price(input_tokens=input_tokens, output_tokens=0)  # its cost: what X-Credits-Charged says
        if raw:
            outcome = Outcome(headers=meter.headers(), content=audio.content, content_type=audio.content_type)
        else:
            name = media.save(audio.content, kind="audio", extension=audio.format)
            result = {"object": "audio.speech", "model": meter.model_name,
                      "audio_url": media.url_for(name, request=request), "format": audio.format,
                      "content_type": audio.content_type, "created": int(time.time()),
                      "remaining_credits": meter.balance()}
            outcome = Outcome(headers=meter.headers(), body=SpeechResult(result).data)
        meter.succeed(input_tokens=input_tokens, output_tokens=0, answer=outcome)
    return outcome


# ---------------------------------------------------------------- embeddings

def create_embeddings(*, request, key: ApiKey, params: dict, sent: set) -> Outcome:
    """POST /v1/embeddings: OpenAI's list shape plus the SPEC's ``embedding`` and ``remaining_credits``."""
    texts = params["input"] if isinstance(params["input"], list) else [params["input"]]
    hold = Hold(input_tokens=lambda: sum(count_tokens(text) for text in texts))
    with metered(request=request, key=key, operation="embedding", model_id=params["model"], hold=hold) as meter:
        payload = _forwarded(params, sent)
        result = meter.call(lambda client: client.embeddings(payload))
        data = sorted(result.get("data") or [], key=lambda item: item.get("index", 0))
        if len(data) != len(texts):
            # Checked before the charge is completed: a short answer is refunded, not sold.
            raise UpstreamError(f"The upstream returned {len(data)} embedding(s) for {len(texts)} input(s).")
        tokens = ledger_tokens(result.get("usage") or {}, "prompt_tokens",
                              lambda: sum(count_tokens(text) for text in texts))
        vectors = [item["embedding"] for item in data]
        cost = meter.price(input_tokens=tokens, output_tokens=0)
        usage: dict[str, int] = {"prompt_tokens": tokens, "total_tokens": tokens, "cost": cost}
        outcome = Outcome(headers=meter.headers(), body={
            "object": "list", "data": data, "model": meter.model_name, "usage": usage,
            "embedding": vectors[0] if isinstance(params["input"], str) else vectors,
            "remaining_credits": meter.balance(),
        })
        meter.succeed(input_tokens=tokens, output_tokens=0, answer=outcome)
    return outcome
