from django.core.management.base import BaseCommand
from django.db.models import F

from keys.models import ApiKey
from keys.services import refill_all
from utils_app import clock


class Command(BaseCommand):
    help = ("Set every active key's credits to its maxCredits (meant for a daily cron). A key's budget is not "
            "renewed by a refill: its next period renews it; the summary counts the keys whose budget is used up.")
    requires_system_checks = []  # Django's checks (the URLconf, every view) run in migrate and manage.py check

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help="only count the keys that would change")

    def handle(self, *args, dry_run=False, **options):
        if dry_run:
            count = ApiKey.objects.active().exclude(credits=F("max_credits")).count()
            self.stdout.write(f"would refill {count} key(s)")
        else:
            count = refill_all(actor="command refill_credits")
            self.stdout.write(self.style.SUCCESS(f"refilled {count} key(s)"))
        self._report_used_up_budgets()

    def _report_used_up_budgets(self) -> None:
        # A refilled balance that the key's budget will not let it spend surprises whoever ran the refill:
        # say so, with when the first of those budgets opens again.
        now = clock.utcnow()
        budgeted = ApiKey.objects.active().filter(budget_credits__isnull=False).only(
            "prefix", "budget_credits", "budget_period", "budget_spent", "budget_period_start")
        ends = [state.end for state in (key.budget_state(now) for key in budgeted.iterator())
                if state is not None and not state.left]
        if ends:
            self.stdout.write(f"{len(ends)} key(s) have used up this period's budget; a refill does not renew a "
                              f"budget (the first renews at {min(ends).isoformat()})")
