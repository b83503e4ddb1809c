import os

from django.conf import settings
from django.core.management.base import BaseCommand

from keys.models import ApiKey, digest_secret
from keys.services import issue_key

# Augmented: the first tier that may use every local model (the heaviest are not given to free keys).
DEMO = {"tier": "augmented", "credits": 1000, "name": "demo (make run)"}


class Command(BaseCommand):
    help = ("Print the demo key of `make run` (secret on the last line): the one issued before while it "
            "exists and is active, else a new one (tier augmented, 1000 credits). Its secret is kept in the data "
            "dir (demo_key, readable by its owner only), since the database keeps only its digest.")
    requires_system_checks = []  # Django's checks (the URLconf, every view) run in migrate and manage.py check

    def handle(self, *args, **options):
        path = settings.DATA_DIR / "demo_key"
        secret = path.read_text().strip() if path.exists() else ""
        key = ApiKey.objects.filter(digest=digest_secret(secret)).first() if secret else None
        if key is not None and key.is_active:
            self.stdout.write(f"Demo key {key.prefix}… (tier {key.tier}, {key.credits} credits left), kept in {path}:")
        else:
            key, secret = issue_key(actor="command demo_key", **DEMO)
            # Created for the owner alone before the secret is written into it, as the secret key is.
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(descriptor, "w") as kept:
                kept.write(secret + "\n")
            path.chmod(0o600)  # a file left by an earlier run keeps its old mode through O_CREAT
            self.stdout.write(f"Demo key {key.prefix}… issued (tier augmented, 1000 credits), kept in {path} for the "
                              f"next run:")
        self.stdout.write(secret)
