from django.core.management.base import BaseCommand

from keys.models import ApiKey
from keys.services import refill_all


class Command(BaseCommand):
    help = "Set every active key's credits to its maxCredits (meant for a daily cron)."
    requires_system_checks = []  # Django's checks (the URLconf, every view) run in migrate and manage.py check

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help="only count the keys that would change")

    def handle(self, *args, dry_run=False, **options):
        if dry_run:
            from django.db.models import F

            count = ApiKey.objects.active().exclude(credits=F("max_credits")).count()
            self.stdout.write(f"would refill {count} key(s)")
            return
        count = refill_all(actor="command refill_credits")
        self.stdout.write(self.style.SUCCESS(f"refilled {count} key(s)"))
