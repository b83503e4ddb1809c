from django.core.management.base import BaseCommand, CommandError

from models_catalog.catalog import DEFAULT_CATALOG, CatalogError, load_catalog


class Command(BaseCommand):
    help = "Create or update providers and models from a TOML catalog file (default: the shipped catalog)."
    requires_system_checks = []  # Django's checks (the URLconf, every view) run in migrate and manage.py check

    def add_arguments(self, parser):
        parser.add_argument("path", nargs="?", help=f"catalog file (default: {DEFAULT_CATALOG.name})")

    def handle(self, *args, path=None, **options):
        try:
            report = load_catalog(path)
        except CatalogError as exc:
            raise CommandError(f"catalog {path or DEFAULT_CATALOG.name}: {exc}") from None
        for outcome in ("created", "updated"):
            for item in report[outcome]:
                self.stdout.write(f"{outcome}: {item}")
        self.stdout.write(self.style.SUCCESS(
            f"{len(report['created'])} created, {len(report['updated'])} updated, "
            f"{len(report['unchanged'])} unchanged"))
