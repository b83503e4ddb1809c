from django.core.management.base import BaseCommand, CommandError

from keys.models import TIERS
from keys.services import issue_key
from utils_app.errors import GatewayError


class Command(BaseCommand):
    help = ("Create an API key. The secret is printed alone on the last line of output; "
            "it is stored only as a digest and cannot be shown again.")

    def add_arguments(self, parser):
        parser.add_argument("--tier", required=True, choices=TIERS)
        parser.add_argument("--credits", type=int, default=0)
        parser.add_argument("--max-credits", type=int, help="credit ceiling (default: --credits)")
        parser.add_argument("--rpm", type=int, default=60, help="requests per minute (1-1000)")
        parser.add_argument("--rph", type=int, default=1000, help="requests per hour (1-10000)")
        parser.add_argument("--max-concurrent", type=int, default=16,
                            help="requests in flight at once, streams included (1-1000)")
        parser.add_argument("--owner-id", default="")
        parser.add_argument("--owner-username", default="")
        parser.add_argument("--owner-category", default="")
        parser.add_argument("--name", default="", help="a label for staff")
        parser.add_argument("--admin", action="store_true", help="may call the /admin API operations")

    def handle(self, *args, **o):
        try:
            key, secret = issue_key(
                actor="command issue_key", tier=o["tier"], credits=o["credits"], max_credits=o["max_credits"],
                rpm=o["rpm"], rph=o["rph"], max_concurrent=o["max_concurrent"], is_admin=o["admin"], name=o["name"],
                owner={"platform_id": o["owner_id"], "platform_username": o["owner_username"],
                       "category": o["owner_category"]})
        except GatewayError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(f"issued {key.prefix}… tier={key.tier} credits={key.credits}/{key.max_credits} "
                          f"rpm={key.rpm} rph={key.rph} maxConcurrent={key.max_concurrent}{' admin' if key.is_admin else ''}")
        self.stdout.write(secret)
