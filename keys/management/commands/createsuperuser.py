"""createsuperuser with the staff password policy on every path (docs/staff-security.md).

Django's own command skips AUTH_PASSWORD_VALIDATORS with --noinput and, at a terminal, offers to
create the user anyway when the password fails them. A staff login may issue and edit every API
key, so here the policy holds either way: a terminal is asked again, --noinput stops with the reason.
(This app comes before django.contrib.auth in INSTALLED_APPS, which is how this command replaces it.)
"""
import getpass
import os

from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

TRIES = 3


class Command(BaseCommand):
    help = ("Create a staff superuser for /admin/. Its password must pass the staff password policy (12 or "
            "more characters, not a common one, not all digits, not close to the username or email). With "
            "--noinput the username, email and password come from DJANGO_SUPERUSER_USERNAME, "
            "DJANGO_SUPERUSER_EMAIL and DJANGO_SUPERUSER_PASSWORD.")
    requires_system_checks = []  # Django's checks (the URLconf, every view) run in migrate and manage.py check

    def add_arguments(self, parser):
        parser.add_argument("--username")
        parser.add_argument("--email")
        parser.add_argument("--noinput", "--no-input", action="store_false", dest="interactive",
                            help="ask nothing: take the DJANGO_SUPERUSER_* variables")

    def handle(self, *args, username=None, email=None, interactive=True, **options):
        def value(given, variable, prompt):
            if given is not None:
                return given.strip()
            return (input(prompt) if interactive else os.environ.get(variable, "")).strip()

        user = get_user_model()(username=value(username, "DJANGO_SUPERUSER_USERNAME", "Username: "),
                                email=value(email, "DJANGO_SUPERUSER_EMAIL", "Email address (optional): "))
        try:
            user.full_clean(exclude=["password"])  # the username's form and uniqueness, the email's form
        except ValidationError as exc:
            raise CommandError(" ".join(exc.messages)) from None
        password = self.ask_password(user) if interactive else os.environ.get("DJANGO_SUPERUSER_PASSWORD")
        if password is None:
            raise CommandError("Set DJANGO_SUPERUSER_PASSWORD: a staff login needs a password.")
        try:
            validate_password(password, user)
        except ValidationError as exc:
            raise CommandError(f"The password was refused: {' '.join(exc.messages)}") from None
        get_user_model().objects.create_superuser(user.username, user.email, password)
        self.stdout.write(f"Superuser {user.username} created.")

    def ask_password(self, user) -> str:
        for _ in range(TRIES):
            password = getpass.getpass("Password: ")
            if password != getpass.getpass("Password (again): "):
                self.stderr.write("The passwords do not match.")
                continue
            try:
                validate_password(password, user)
            except ValidationError as exc:
                self.stderr.write("\n".join(exc.messages))
                continue
            return password
        raise CommandError(f"No password passed the staff password policy in {TRIES} tries.")
