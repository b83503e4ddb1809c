"""What the gateway has learnt about a metered request so far: one typed record per request.

The view builds it top to bottom (gateway.views.MeteredView): the key authentication found, the
body parsed once, the model the body names (from the catalog snapshot, as the client named it),
the key's limit windows and the model's health, both from the request's one Redis round trip.
The metering pipeline (gateway.pipeline) reads it from there; nothing travels in loose attributes
of the request, and no lower floor reaches up to fill it.
"""
from dataclasses import dataclass
from weakref import WeakKeyDictionary

from django.http import HttpRequest
from rest_framework.request import Request

from gateway import routing
from keys.limits import LimitState
from keys.models import ApiKey
from models_catalog.served import ServedModel
from utils_app.errors import GatewayError


@dataclass
class RequestNotes:
    key: ApiKey | None = None
    # The JSON object the body holds, or why it holds none (raised once the request has been counted).
    body: dict | GatewayError | None = None
    # The model the body names, by the name the client sent (an id or an alias), if the catalog has it.
    model_name: str | None = None
    model: ServedModel | None = None
    # That model once resolved for this key and the view's operation (its type and the tier checked): what the
    # metering pipeline admits, so the model is resolved once a request.
    resolved: ServedModel | None = None
    limits: LimitState | None = None
    health: routing.Health | None = None

    def limit_headers(self) -> dict:
        return self.limits.headers() if self.limits is not None else {}


_notes: "WeakKeyDictionary[HttpRequest, RequestNotes]" = WeakKeyDictionary()


def notes_of(request) -> RequestNotes:
    """The record of ``request`` (Django's request, or DRF's around it), made empty on first use."""
    django_request = request._request if isinstance(request, Request) else request
    found = _notes.get(django_request)
    if found is None:
        found = _notes[django_request] = RequestNotes()
    return found
