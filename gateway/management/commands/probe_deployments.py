"""Probe deployments by hand: the disabled ones (re-enabled when they answer), or all with --all."""
from django.core.management.base import BaseCommand, CommandError

from gateway.probes import deployments, probe


class Command(BaseCommand):
    help = ("Probe disabled deployments with the cheapest call that proves their secret and model work, and "
            "enable again those that answer; --all probes every deployment (nothing is disabled by a probe). "
            "A deployment whose secret's variable is not set here is listed as not configured, without a call. "
            "Exits with status 1 when a probe failed.")
    requires_system_checks = []  # Django's checks (the URLconf, every view) run in migrate and manage.py check

    def add_arguments(self, parser):
        parser.add_argument("--all", action="store_true", help="probe every deployment, not only disabled ones")

    def handle(self, *args, all, **options):
        chosen = deployments(disabled_only=not all)
        if not chosen:
            self.stdout.write("no deployment to probe" + ("" if all else " (none is disabled)"))
            return
        rows, failed, unset = [("id", "model", "provider", "secret", "upstream model", "result")], 0, 0
        for deployment in chosen:
            if not deployment.provider.secret_configured(deployment.secret_env):
                unset += 1
                outcome = f"not configured: set {deployment.secret_env} on this server"
            else:
                result = probe(deployment)
                failed += not result.ok
                outcome = "ok" + (", enabled again" if result.enabled else "") if result.ok else result.detail
            rows.append((str(deployment.pk), deployment.model.model_id, deployment.provider.name,
                         deployment.secret_env or "-", deployment.upstream_name, outcome))
        widths = [max(len(row[column]) for row in rows) for column in range(5)]
        for row in rows:
            self.stdout.write("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[5])
        self.stdout.write(f"{len(chosen) - unset} probed, {failed} failed, {unset} not configured")
        if failed:
            raise CommandError(f"{failed} of {len(chosen) - unset} probes failed")
