from django.apps import AppConfig


class UtilsAppConfig(AppConfig):
    name = "utils_app"
    verbose_name = "Shared utilities"

    def ready(self):
        # drf-spectacular finds extensions by import: registered here, the serializers' schema_rules
        # reach every schema, not only those built after some view module happened to import it.
        from utils_app import schema  # noqa: F401

