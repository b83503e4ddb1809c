from django.core.management.base import BaseCommand, CommandError

from keys.models import BUDGET_PERIODS, RANGES, TIERS, ApiKey, KeyRuleError
from keys.services import issue_key


def _range(field: str) -> str:
    least, most = RANGES[field]
    return f"{least}-{most}"


class Command(BaseCommand):
    help = ("Create an API key. The secret is printed alone on the last line of output; "
            "it is stored only as a digest and cannot be shown again.")
    requires_system_checks = []  # Django's checks (the URLconf, every view) run in migrate and manage.py check

    def add_arguments(self, parser):
        # Each option's dest is the ApiKey field it sets; one left out takes the model's default.
        parser.add_argument("--tier", required=True, choices=TIERS)
        parser.add_argument("--credits", type=int)
        parser.add_argument("--max-credits", type=int, help="credit ceiling (default: --credits)")
        parser.add_argument("--rpm", type=int, help=f"requests per minute ({_range('rpm')})")
        parser.add_argument("--rph", type=int, help=f"requests per hour ({_range('rph')})")
        parser.add_argument("--max-concurrent", type=int,
                            help=f"requests in flight at once, streams included ({_range('max_concurrent')})")
        parser.add_argument("--budget-credits", type=int,
                            help="the most the key may be charged per budget period, holds included (with "
                                 "--budget-period)")
        parser.add_argument("--budget-period", choices=BUDGET_PERIODS,
                            help="UTC calendar period of the budget (weeks from Monday)")
        parser.add_argument("--tpm", type=int, help=f"tokens per minute, input plus output ({_range('tpm')})")
        parser.add_argument("--owner-id", dest="owner_platform_id", metavar="OWNER_ID")
        parser.add_argument("--owner-username", dest="owner_platform_username", metavar="OWNER_USERNAME")
        parser.add_argument("--owner-category", dest="owner_category", metavar="OWNER_CATEGORY")
        parser.add_argument("--name", help="a label for staff")
        parser.add_argument("--admin", dest="is_admin", action="store_true", help="may call the /admin API operations")

    def handle(self, *args, **o):
        fields = {field.name for field in ApiKey._meta.fields}
        try:
            key, secret = issue_key(actor="command issue_key", **{k: v for k, v in o.items() if k in fields})
        except KeyRuleError as broken:
            raise CommandError(broken.message) from None
        budget = f" budget={key.budget_credits}/{key.budget_period}" if key.budget_credits is not None else ""
        tpm = f" tpm={key.tpm}" if key.tpm is not None else ""
        self.stdout.write(f"issued {key.prefix}… tier={key.tier} credits={key.credits}/{key.max_credits} "
                          f"rpm={key.rpm} rph={key.rph} maxConcurrent={key.max_concurrent}{budget}{tpm}"
                          f"{' admin' if key.is_admin else ''}")
        self.stdout.write(secret)
