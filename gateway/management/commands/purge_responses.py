"""Delete stored Responses API responses older than the retention period (the sweeper also does it)."""
from django.conf import settings
from django.core.management.base import BaseCommand

from gateway import sweeper
from gateway.models import StoredResponse


class Command(BaseCommand):
    help = ("Delete the responses /v1/responses stored (store: true) longer ago than RESPONSES_RETENTION_DAYS. "
            "Their ids stop working for previous_response_id and GET /v1/responses/{id}.")
    requires_system_checks = []  # Django's checks (the URLconf, every view) run in migrate and manage.py check

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help="Only report what would be deleted.")

    def handle(self, *args, dry_run, **options):
        days = settings.RESPONSES_RETENTION_DAYS
        if dry_run:
            self.stdout.write(f"Would delete {StoredResponse.objects.expired().count()} stored response(s) older "
                              f"than {days} day(s).")
            return
        self.stdout.write(f"Deleted {sweeper.purge_stored_responses()} stored response(s) older than {days} day(s).")
