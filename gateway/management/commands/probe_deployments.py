"""Probe deployments by hand: the disabled ones (re-enabled when they answer), or all with --all."""
from django.core.management.base import BaseCommand

from gateway.probes import deployments, probe


class Command(BaseCommand):
    help = ("Probe disabled deployments with the cheapest call that proves their secret and model work, and "
            "enable again those that answer; --all probes every deployment (nothing is disabled by a probe).")

    def add_arguments(self, parser):
        parser.add_argument("--all", action="store_true", help="probe every deployment, not only disabled ones")

    def handle(self, *args, all, **options):
        chosen = deployments(disabled_only=not all)
        if not chosen:
            self.stdout.write("no deployment to probe" + ("" if all else " (none is disabled)"))
            return
        rows = [("id", "model", "provider", "secret", "upstream model", "result")]
        for deployment in chosen:
            result = probe(deployment)
            outcome = "ok" + (", enabled again" if result.enabled else "") if result.ok else result.detail
            rows.append((str(deployment.pk), deployment.model.model_id, deployment.provider.name,
                         deployment.secret_env or "-", deployment.upstream_name, outcome))
        widths = [max(len(row[column]) for row in rows) for column in range(5)]
        for row in rows:
            self.stdout.write("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[5])
        failed = sum(1 for row in rows[1:] if not row[5].startswith("ok"))
        self.stdout.write(f"{len(rows) - 1} probed, {failed} failed")
