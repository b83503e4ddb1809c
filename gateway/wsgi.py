"""The WSGI application (``gunicorn gateway.wsgi``), loaded once by each worker process.

A bad setting (a variable that is not a number, a malformed URL…) stops the worker with one
line naming the variable instead of a traceback; under gunicorn as an application that failed
to load, which stops the server, where any other failure would have it fork new workers that
fail the same way. Once loaded and its database pool open, a gunicorn worker says which
providers it cannot call (gateway.gunicorn_conf.post_worker_init): not at import, which would
take a database connection before the pool is sized, and not in management commands.
"""
import logging
import os

from django.core.exceptions import ImproperlyConfigured

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway.settings")

log = logging.getLogger("gateway.catalog")


def _stop(message: str) -> BaseException:
    try:
        from gunicorn.errors import AppImportError
    except ImportError:  # another WSGI server
        return SystemExit(message)
    return AppImportError(message)  # gunicorn prints it alone and stops: "App failed to load"


try:
    from django.conf import settings

    settings.INSTALLED_APPS  # reads and checks every variable (gateway/settings.py)
except ImproperlyConfigured as exc:
    raise _stop(str(exc)) from None

import django  # noqa: E402
from django.core.handlers.wsgi import WSGIHandler  # noqa: E402


class ApiHandler(WSGIHandler):
    """Django's handler with settings.API_MIDDLEWARE as its chain: the JSON API's requests skip the
    layers that only step aside there (seven of the site's twelve did nothing on /v1).

    Django builds a handler's chain once, from settings.MIDDLEWARE, when the handler is made (at the
    worker's start, before any request): the setting names the API's chain for that moment only."""

    def load_middleware(self, is_async=False):
        site_chain = settings.MIDDLEWARE
        settings.MIDDLEWARE = settings.API_MIDDLEWARE
        try:
            super().load_middleware(is_async)
        finally:
            settings.MIDDLEWARE = site_chain


class Application:
    """Paths under API_PATH_PREFIXES to the API's handler, every other path to the whole chain."""

    def __init__(self):
        self.site = WSGIHandler()
        self.api = ApiHandler()
        self.prefixes = tuple(settings.API_PATH_PREFIXES)

    def __call__(self, environ, start_response):
        handler = self.api if environ.get("PATH_INFO", "").startswith(self.prefixes) else self.site
        response = handler(environ, start_response)
        if environ.get("REQUEST_METHOD") == "HEAD":
            return _NoBody(response)
        return response


class _NoBody:
    """The answer to a HEAD request: the headers the GET would get (its Content-Length included), no body.

    Django renders the GET's body for HEAD and leaves dropping it to the server; gunicorn drops it
    with a warning for each request (RFC 9110: a HEAD answer has no body), so a HEAD health check
    would fill the log. Here, the one place every answer passes, the body is never handed to the
    server. Closing it still runs what closing the response runs (the request's end, a stream's
    settlement, a served file's close).
    """

    def __init__(self, response):
        self._response = response

    def __iter__(self):
        return iter(())

    def close(self) -> None:
        close = getattr(self._response, "close", None)
        if close is not None:
            close()


django.setup(set_prefix=False)
application = Application()


def warn_unconfigured_providers() -> None:
    """One warning for each provider with a secret this process does not hold that a deployment of an
    enabled model needs: the operator learns it at start, not from a client's 502."""
    from django.db import DatabaseError, connection

    from models_catalog.catalog import secret_env_allowed, snapshot
    from utils_app.db import release_connection, unavailable_cause

    try:
        catalog = snapshot()
    except DatabaseError as exc:  # a report at start must never stop the worker (the database may be starting)
        log.warning("could not check the providers' secrets at start: %s", unavailable_cause(exc))
        return
    finally:
        release_connection(connection)  # back to the pool: requests take their own
    for provider in catalog.providers.values():
        missing = [variable for variable in provider.secret_envs() if not provider.secret_configured(variable)]
        served = sorted({model.model_id for model in catalog.models.values() for deployment in model.pool
                         if deployment.provider is provider and deployment.secret_env in missing})
        if not served:
            continue
        why = ", ".join(f"{variable} is not set" if secret_env_allowed(variable)
                        else f"{variable} may not hold an upstream secret (UPSTREAM_SECRET_ENV_ALLOW)"
                        for variable in missing)
        log.warning("provider %s is not configured: %s, so its deployments of %d model(s) cannot be called (%s); "
                    "a model with no other deployment answers 502 upstream_unavailable", provider.name, why,
                    len(served), ", ".join(served))

