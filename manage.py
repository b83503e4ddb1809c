#!/usr/bin/env python
import os
import sys


def check_settings():
    """Read every setting (gateway/settings.py): a bad one stops the process with one line naming the
    variable, not a traceback that hides it. gateway.gunicorn_conf runs this before serving too."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway.settings")
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured

    try:
        settings.INSTALLED_APPS
    except ImproperlyConfigured as exc:
        sys.exit(str(exc))


def main():
    check_settings()
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
