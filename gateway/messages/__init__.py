"""Anthropic's Messages API, inbound: ``POST /v1/messages`` and ``/v1/messages/count_tokens`` (CONTRACT
section 8), for clients built on Anthropic's SDK (Claude Code and the like).

A request is translated into the OpenAI-shaped chat request the rest of the gateway speaks and runs
through the very same metering pipeline as /v1/chat/completions (gateway.services.chat_completion):
the same limits, charge, ledger and usage rows, Idempotency-Key and deployments. What comes back is
translated into Anthropic's shapes here: the message object, the event stream, and errors as
``{"type": "error", "error": {"type", "message"}}``. An ``anthropic`` deployment is the exception
(AnthropicDialect): it gets the request passed through as the client sent it, and its answer or
events reach the client as they came; the translation then only feeds the metering.

What translates, what is left out and named (X-Gateway-Ignored) and what is refused is listed in
docs/providers.md.
"""
