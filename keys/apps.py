from django.apps import AppConfig


class KeysConfig(AppConfig):
    name = "keys"
    verbose_name = "API keys and credits"
