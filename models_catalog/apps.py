from django.apps import AppConfig


class ModelsCatalogConfig(AppConfig):
    name = "models_catalog"
    verbose_name = "Model catalog and usage"

    def ready(self):
        from models_catalog import catalog  # noqa: F401  (connects the cache-invalidation signals)
