from django.apps import AppConfig


class UtilsAppConfig(AppConfig):
    name = "utils_app"
    verbose_name = "Shared utilities"

    def ready(self):
        # drf-spectacular finds extensions by import: registered here, the serializers' schema_rules
        # reach every schema, not only those built after some view module happened to import it.
        from utils_app import schema  # noqa: F401

        skip_closing_caches_that_close_nothing()


def skip_closing_caches_that_close_nothing() -> bool:
    """Disconnect Django's ``close_caches`` from ``request_finished`` when every configured cache's
    ``close`` is the base class's, which does nothing (Redis through a shared client, local memory):
    it only walks the caches the request used, through context-local storage, to call that nothing
    (some 35,000 instructions of a metered request, docs/performance.md). A backend with a close of
    its own (memcached) keeps it connected. Returns whether it was disconnected."""
    from django.conf import settings
    from django.core import signals
    from django.core.cache import close_caches
    from django.core.cache.backends.base import BaseCache
    from django.utils.module_loading import import_string

    if any(import_string(options["BACKEND"]).close is not BaseCache.close for options in settings.CACHES.values()):
        return False
    return signals.request_finished.disconnect(close_caches)
