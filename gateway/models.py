"""What the gateway itself keeps of the model operations: the Responses API's stored responses.

OpenAI keeps a response for ``previous_response_id`` and ``GET /v1/responses/{id}``; a gateway that
calls its upstreams with ``store: false`` (CONTRACT section 9) keeps them here instead, owned by the key
that made them. The row is written by the request's settlement statement itself (gateway.metering.Also),
so it exists before the answer or the stream's last event leaves, and a follow-up sent at once finds it.
"""
from datetime import timedelta

from django.conf import settings
from django.db import models

from utils_app import clock


class StoredResponseQuerySet(models.QuerySet):
    def of_key(self, key) -> "StoredResponseQuerySet":
        return self.filter(key=key)

    def expired(self) -> "StoredResponseQuerySet":
        """Older than RESPONSES_RETENTION_DAYS: what purge_responses and the sweeper delete."""
        return self.filter(created_at__lt=clock.utcnow() - timedelta(days=settings.RESPONSES_RETENTION_DAYS))


class StoredResponse(models.Model):
    # The gateway's own id (resp_…), the one the client was given.
    id = models.CharField(primary_key=True, max_length=64)
    key = models.ForeignKey("keys.ApiKey", on_delete=models.CASCADE, related_name="stored_responses")
    # The response object as the client got it (encrypted reasoning included, the client's model name).
    response = models.JSONField()
    # Every input item the response was made from, the previous responses' included: a follow-up's
    # conversation is these items and the response's output, read in one query.
    input_items = models.JSONField()
    created_at = models.DateTimeField(db_index=True)
    # The request that made it (its X-Request-ID, on its ledger and usage rows): how staff find it from a
    # key's recent requests.
    request_id = models.CharField(max_length=128, blank=True, db_index=True)

    objects = StoredResponseQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.id

    @property
    def model_name(self) -> str:
        return str(self.response.get("model") or "")
