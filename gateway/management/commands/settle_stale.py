"""Refund the charges a dead worker left pending (the service also runs this by itself; docs/ledger.md)."""
from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from gateway.sweeper import drop_expired_claims, settle_stale, stale_after, stale_charges


class Command(BaseCommand):
    help = ("Refund charges still pending after the longest their requests could run (a worker died "
            "mid-request), marking them abandoned; drop expired Idempotency-Key claims.")
    requires_system_checks = []  # Django's checks (the URLconf, every view) run in migrate and manage.py check

    def add_arguments(self, parser):
        parser.add_argument("--older-than", type=float, default=None, metavar="SECONDS",
                            help="pending for longer than this, instead of the longest a request could run (the "
                                 "catalog's longest provider timeout + STREAM_MAX_SECONDS + 60 s, at least "
                                 "LEDGER_STALE_SECONDS): shorter only once no worker can still be running them")
        parser.add_argument("--dry-run", action="store_true", help="only count what would be refunded")

    def handle(self, *args, older_than, dry_run, **options):
        if older_than is None:
            older_than = stale_after()
        if older_than < 0:
            raise CommandError("--older-than must be 0 or more seconds")
        if dry_run:
            stale = stale_charges(timezone.now() - timedelta(seconds=older_than))
            self.stdout.write(f"would abandon and refund {stale.count()} charge(s) pending for more than "
                              f"{older_than:g}s")
            return
        abandoned = settle_stale(older_than=older_than)
        dropped = drop_expired_claims()
        self.stdout.write(f"abandoned and refunded {abandoned} charge(s) pending for more than {older_than:g}s; "
                          f"dropped {dropped} expired Idempotency-Key claim(s)")
