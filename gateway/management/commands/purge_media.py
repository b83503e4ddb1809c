"""Delete generated images and audio older than the retention period (meant for cron)."""
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from gateway import media


class Command(BaseCommand):
    help = ("Delete generated media files (images, audio) older than --older-than HOURS "
            "(default MEDIA_RETENTION_HOURS). Their URLs stop working.")
    requires_system_checks = []  # Django's checks (the URLconf, every view) run in migrate and manage.py check

    def add_arguments(self, parser):
        parser.add_argument("--older-than", type=float, default=settings.MEDIA_RETENTION_HOURS, metavar="HOURS",
                            help="Age in hours past which a file is deleted (default %(default)s).")
        parser.add_argument("--dry-run", action="store_true", help="Only report what would be deleted.")

    def handle(self, *args, older_than, dry_run, **options):
        if older_than < 0:
            raise CommandError("--older-than must be 0 or more hours.")
        report = media.purge(older_than_hours=older_than, dry_run=dry_run)
        verb = "Would delete" if dry_run else "Deleted"
        self.stdout.write(f"{verb} {report.files} file(s), {report.bytes} bytes, older than {older_than:g} hour(s) "
                          f"in {media.root()}.")
