"""embedContent and batchEmbedContents: decoded, and metered as /v1/embeddings is (operation ``embedding``)."""
from dataclasses import dataclass, field

from gateway.gemini_api.members import member, need, need_dict, need_list, obj
from gateway.tokens import count_tokens
from gateway.pipeline import Outcome, metered
from gateway.prices import Hold
from gateway.upstream.gemini import GeminiAdapter
from gateway.upstream.gemini_native import embed_native
from keys.models import ApiKey
from utils_app.errors import InvalidRequest, UpstreamError


@dataclass
class EmbedRequest:
    """embedContent's or batchEmbedContents' body decoded: the texts, in order, and the dimensions asked for."""

    method: str
    texts: list[str]
    dimensions: int | None
    ignored: list[str] = field(default_factory=list)


def embed_request(body: dict, model_id: str, method: str) -> EmbedRequest:
    if method == "embedContent":
        items = [(body, "")]
    else:
        requests = member(body, "requests")
        need(isinstance(requests, list) and bool(requests), "requests", "must be a non-empty array of requests.")
        items = [(need_dict(item, f"requests.{index}"), f"requests.{index}.") for index, item in enumerate(requests)]
    texts, sizes, ignored = [], [], []
    for item, prefix in items:
        named = item.get("model")
        if isinstance(named, str) and named.removeprefix("models/") != model_id:
            raise InvalidRequest(f"{prefix}model: {named!r} does not match the model of the path "
                                 f"('models/{model_id}').", param=f"{prefix}model")
        content = need_dict(member(item, "content"), f"{prefix}content")
        parts = need_list(member(content, "parts"), f"{prefix}content.parts")
        pieces = []
        for index, part in enumerate(parts):
            text = member(need_dict(part, f"{prefix}content.parts.{index}"), "text")
            need(isinstance(text, str), f"{prefix}content.parts.{index}.text", "must be a string: only text is "
                                                                                  "embedded.")
            pieces.append(text)
        texts.append(" ".join(pieces))
        size = member(item, "outputDimensionality")
        sizes.append(size)  # any JSON value: compared, not hashed
        for name in ("taskType", "title"):
            if member(item, name) is not None:
                ignored.append(f"{prefix}{name}")
    need(all(size == sizes[0] for size in sizes), "requests",
         "every request of a batch must ask for the same outputDimensionality.")
    size = sizes[0]
    need(size is None or (type(size) is int and size >= 1), f"{items[0][1]}outputDimensionality",
          "must be a positive integer.")
    return EmbedRequest(method=method, texts=texts, dimensions=size, ignored=ignored)


def embedding_params(request: EmbedRequest, model_id: str) -> dict:
    """The /v1/embeddings parameters of the same texts (validated by gateway.media_serializers.EmbeddingsRequest)."""
    params: dict = {"model": model_id, "input": request.texts}
    if request.dimensions is not None:
        params["dimensions"] = request.dimensions
    return params


def embed(*, request, key: ApiKey, model_id: str, embed_request: EmbedRequest, body: dict, params: dict) -> Outcome:
    """POST models/{id}:embedContent and :batchEmbedContents: metered as /v1/embeddings is (operation
    ``embedding``); a gemini deployment gets the request as it came, any other the texts as OpenAI's input."""
    texts = embed_request.texts
    hold = Hold(input_tokens=lambda: sum(count_tokens(text) for text in texts))
    with metered(request=request, key=key, operation="embedding", model_id=model_id, hold=hold) as meter:
        def call(client) -> tuple[list[list[float]], int | None]:
            if isinstance(client, GeminiAdapter):
                return embed_native(client, embed_request.method, body)
            client.ignored.extend(embed_request.ignored)
            answer = client.embeddings({"model": model_id, "input": texts, "encoding_format": "float",
                                        **({"dimensions": params["dimensions"]} if "dimensions" in params else {})})
            data = sorted(answer.get("data") or [], key=lambda item: item.get("index", 0))
            usage = obj(answer.get("usage"))
            tokens = usage.get("prompt_tokens")
            return [item.get("embedding") for item in data], tokens if type(tokens) is int and tokens >= 0 else None

        vectors, reported = meter.call(call)
        if len(vectors) != len(texts) or not all(isinstance(vector, list) for vector in vectors):
            # Checked before the charge is completed: a short answer is refunded, not sold.
            raise UpstreamError(f"The upstream returned {len(vectors)} embedding(s) for {len(texts)} input(s).")
        tokens = reported if reported is not None else sum(count_tokens(text) for text in texts)
        meter.price(input_tokens=tokens, output_tokens=0)  # what X-Credits-Charged says
        answer: dict = {"embedding": {"values": vectors[0]}} if embed_request.method == "embedContent" else \
            {"embeddings": [{"values": vector} for vector in vectors]}
        outcome = Outcome(headers=meter.headers(), body=answer)
        meter.succeed(input_tokens=tokens, output_tokens=0, answer=outcome)
    return outcome
