"""Check that every key's balance is the sum of its ledger, and every settled price its terms' (docs/ledger.md)."""
from django.core.management.base import BaseCommand

from keys.ledger import mismatches
from keys.models import ApiKey
from keys.pricing import mispriced


class Command(BaseCommand):
    help = ("Check every key's balance against the sum of its ledger, its in-flight count against its pending "
            "charges, and every completed charge's amount against its tokens, unit prices, request fee and "
            "hold. Prints each mismatch; exits 1 if there is one.")
    requires_system_checks = []  # Django's checks (the URLconf, every view) run in migrate and manage.py check

    def add_arguments(self, parser):
        parser.add_argument("--key", default="", metavar="PREFIX", help="only keys whose display prefix starts so")

    def handle(self, *args, **options):
        prefix = options["key"]
        found = [*mismatches(prefix=prefix), *mispriced(prefix=prefix)]
        for mismatch in found:
            self.stdout.write(f"MISMATCH {mismatch}")
        checked = (ApiKey.objects.filter(prefix__startswith=prefix) if prefix else ApiKey.objects).count()
        self.stdout.write(f"checked {checked} key(s): {len(found)} mismatch(es)")
        if found:
            raise SystemExit(1)
