"""GET /metrics: the Prometheus scrape, with the figures read live when it is taken.

The counters are kept by utils_app.metrics as requests go. Two things are read here,
at scrape time only, so that no request pays for them: the database pool of the
process that answers (psycopg_pool's own statistics, in memory; PostgreSQL only) and
the pending ledger charges (one query through the partial index on pending rows).
"""
import logging

from django.db import connection
from django.http import Http404, HttpResponse
from prometheus_client.core import GaugeMetricFamily

from keys.ledger import pending_charges
from models_catalog.models import Deployment
from utils_app import metrics
from utils_app.error_handler import json_error
from utils_app.errors import AccessDenied, MethodNotAllowed

log = logging.getLogger("gateway.metrics")


class DatabasePoolCollector:
    """The pool of the worker that answers the scrape: each worker has its own (docs/operations.md)."""

    def collect(self):
        pool = getattr(connection, "pool", None) if connection.vendor == "postgresql" else None
        if pool is None:
            return
        stats = pool.get_stats()
        yield GaugeMetricFamily("gateway_db_pool_connections_open", "Connections this worker's pool holds "
                                "open, lent or not.", value=stats["pool_size"])
        yield GaugeMetricFamily("gateway_db_pool_connections_in_use", "Connections of this worker's pool "
                                "lent to requests.", value=stats["pool_size"] - stats["pool_available"])
        yield GaugeMetricFamily("gateway_db_pool_requests_waiting", "Requests of this worker waiting for a "
                                "connection of its pool.", value=stats.get("requests_waiting", 0))
        yield GaugeMetricFamily("gateway_db_pool_max_size", "Most connections this worker's pool may hold "
                                "(DATABASE_POOL_SIZE, or its share of DATABASE_MAX_CONNECTIONS).",
                                value=stats["pool_max"])


class LedgerCollector:
    def collect(self):
        try:
            pending = pending_charges()
        except Exception:  # the database is down: the scrape still shows everything else
            log.warning("pending ledger charges could not be read for /metrics", exc_info=True)
            return
        yield GaugeMetricFamily("gateway_ledger_pending_charges", "Charges not settled yet (requests in "
                                "flight, or left behind by a dead worker).", value=pending["count"])
        yield GaugeMetricFamily("gateway_ledger_oldest_pending_seconds", "Age of the oldest pending charge; "
                                "0 when there is none.", value=pending["oldest_seconds"] or 0)


class DeploymentCollector:
    """How many deployments are disabled right now: the database says so (gateway.deployment_health)."""

    def collect(self):
        try:
            disabled = Deployment.objects.filter(disabled_at__isnull=False).count()
        except Exception:  # the database is down: the scrape still shows everything else
            log.warning("disabled deployments could not be counted for /metrics", exc_info=True)
            return
        yield GaugeMetricFamily("gateway_deployments_disabled", "Deployments disabled right now (a refused secret, "
                                "or by hand); a probe or a person enables them again.", value=disabled)


def metrics_view(request):
    if not metrics.enabled():
        raise Http404("No metrics here: set METRICS_TOKEN or METRICS_ALLOW.")
    if request.method not in ("GET", "HEAD"):
        return json_error(MethodNotAllowed(f"Method {request.method} is not allowed here."))
    if not metrics.may_read(request):
        return json_error(AccessDenied("Metrics need the METRICS_TOKEN bearer token or an address in "
                                       "METRICS_ALLOW.", code="metrics_forbidden"))
    # The pool first: the ledger query then takes a connection of it for the scrape itself.
    body, content_type = metrics.exposition(collectors=(DatabasePoolCollector(), LedgerCollector(), DeploymentCollector()),
                                            accept=request.META.get("HTTP_ACCEPT", ""))
    response = HttpResponse(body, content_type=content_type)
    response["Cache-Control"] = "no-store"
    return response
