"""Google's Gemini API, inbound (CONTRACT section 10): the codec between Google's shapes and the gateway's
OpenAI-shaped chat and embedding requests, for clients built on Google's SDKs (Gemini CLI, google-genai).

A GenerateContentRequest is decoded here into the chat parameters the rest of the gateway speaks and runs
through the very same metering pipeline as /v1/chat/completions (gateway.services.chat_completion, with
``GeminiDialect``): the same limits, charge, ledger and usage rows (operation ``gemini``), Idempotency-Key
and deployments. The chat answer and its stream chunks are encoded back into GenerateContentResponse
objects here. A ``gemini`` deployment is the exception: it gets the request as the client sent it (only
the model, which travels in the path, replaced), so everything Google's API takes reaches it untouched,
``thoughtSignature`` parts byte for byte; its answer reaches the client as Google sent it, and the
translation only feeds the metering. Embeddings (``embedContent``, ``batchEmbedContents``) are metered as
/v1/embeddings is (operation ``embedding``).

Members are read in camelCase or snake_case, as Google's API reads them. What a deployment of another type
cannot honour follows CONTRACT section 8: dropped and named in X-Gateway-Ignored where the answer keeps
its shape without it, refused (400 unsupported_parameter, after the pool's other deployments were tried)
where it would not. docs/gemini-ingress.md lists each member and what becomes of it.
"""
