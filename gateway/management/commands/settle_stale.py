from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from gateway.sweeper import drop_expired_claims, settle_stale


class Command(BaseCommand):
    help = ("Refund charges still pending after the longest allowed upstream call (a worker died "
            "mid-request), marking them abandoned; drop expired Idempotency-Key claims.")

    def add_arguments(self, parser):
        parser.add_argument("--older-than", type=float, default=None, metavar="SECONDS",
                            help=f"pending for longer than this (default LEDGER_STALE_SECONDS, "
                                 f"now {settings.LEDGER_STALE_SECONDS})")

    def handle(self, *args, **options):
        older_than = options["older_than"]
        if older_than is None:
            older_than = settings.LEDGER_STALE_SECONDS
        if older_than < 0:
            raise CommandError("--older-than must be 0 or more seconds")
        abandoned = settle_stale(older_than=older_than)
        dropped = drop_expired_claims()
        self.stdout.write(f"abandoned and refunded {abandoned} charge(s) pending for more than {older_than:g}s; "
                          f"dropped {dropped} expired Idempotency-Key claim(s)")
