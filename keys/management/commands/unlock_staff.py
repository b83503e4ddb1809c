from django.core.management.base import BaseCommand, CommandError

from keys.staff_security import failures_on_record, lift_lockout


class Command(BaseCommand):
    help = ("Lift a staff sign-in lockout: forget the failed sign-ins of one username or of one client "
            "address, so it may try again at once. Written to the audit log.")
    requires_system_checks = []  # Django's checks (the URLconf, every view) run in migrate and manage.py check

    def add_arguments(self, parser):
        target = parser.add_mutually_exclusive_group(required=True)
        target.add_argument("--username", help="the staff login name that was locked out")
        target.add_argument("--address", help="the client IP address that was locked out")
        parser.add_argument("--dry-run", action="store_true", help="only count the failure records")

    def handle(self, *args, username=None, address=None, dry_run=False, **options):
        username, address = (username or "").strip(), (address or "").strip()
        if not (username or address):
            raise CommandError("--username or --address must not be empty")
        who = f"username {username!r}" if username else f"address {address}"
        try:
            if dry_run:
                self.stdout.write(f"would remove {failures_on_record(username=username, address=address)} "
                                  f"failure record(s) of {who}")
                return
            removed = lift_lockout(username=username, address=address, actor="command unlock_staff")
        except ValueError:
            raise CommandError(f"{address!r} is not an IP address") from None
        if removed:
            self.stdout.write(self.style.SUCCESS(f"lifted the lockout of {who}: removed {removed} failure record(s)"))
        else:
            self.stdout.write(f"no failed sign-ins on record for {who}: nothing to lift")
