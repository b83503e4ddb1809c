"""OpenAI's Responses API, inbound: ``POST /v1/responses`` and the stored responses (CONTRACT section 9), for
the clients that speak nothing else (Codex CLI) or prefer it (the openai SDK's ``responses.*``, the OpenAI
Agents SDK, LangChain's ``use_responses_api``, LiteLLM's ``responses()``).

A request runs through the very same metering pipeline as /v1/chat/completions
(gateway.services.chat_completion) with its own dialect, ``ResponsesDialect``:

- towards an ``openai`` or ``azure`` deployment whose provider serves the Responses API (the catalog's
  ``responses_api``, true unless set otherwise) the request is passed through, with the deployment's model,
  ``store: false`` and the conversation rebuilt from the gateway's store; its answer or events reach the
  client under the gateway's ``resp_`` id, the client's model name and the gateway's own sequence numbers;
- towards every other deployment it is translated into a chat request (``chat_params``), and the chat
  completion or chunks come back as a response object or the Responses event stream.

The gateway keeps the state: with ``store`` true the response and its input items are written by the
settlement statement itself (``kept``: gateway.metering.Also), so they exist before the answer or the
stream's last event leaves. Encrypted reasoning is handed out wrapped with the id of the deployment that
made it; a follow-up prefers that deployment (gateway.routing.Attempts.prefer) and leaves the items out
towards any other. What is passed, translated, dropped and refused is listed in docs/responses.md.
"""
