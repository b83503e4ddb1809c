"""`make run`'s demo key: issued once and printed again on every run, never issued for a server that cannot start."""
import os
import re
import socket
import stat
import subprocess
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

from keys.models import ApiKey, AuditLog, digest_secret

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def data_dir(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    return tmp_path


def demo_key() -> tuple[str, str]:
    out = StringIO()
    call_command("demo_key", stdout=out)
    *said, secret = out.getvalue().splitlines()
    return " ".join(said), secret


def test_the_first_run_issues_the_demo_key_and_keeps_its_secret_for_the_owner_alone(data_dir):
    said, secret = demo_key()
    key = ApiKey.objects.get()
    assert key.digest == digest_secret(secret)
    assert (key.tier, key.credits, key.max_credits, key.name) == ("augmented", 1000, 1000, "demo (make run)")
    assert "issued (tier augmented, 1000 credits)" in said
    kept = data_dir / "demo_key"
    assert kept.read_text().strip() == secret
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600


def test_later_runs_print_the_same_key_and_issue_nothing(data_dir):
    _, first = demo_key()
    ApiKey.objects.update(credits=990)
    said, again = demo_key()
    assert again == first
    assert "990 credits left" in said
    assert ApiKey.objects.count() == 1 and AuditLog.objects.filter(action="create_key").count() == 1


@pytest.mark.parametrize("lost", ["revoked", "another secret"])  # keys are never deleted
def test_a_demo_key_that_no_longer_works_is_replaced(data_dir, lost):
    _, first = demo_key()
    if lost == "revoked":
        ApiKey.objects.update(is_active=False)
    else:
        (data_dir / "demo_key").write_text("sk-" + "x" * 43)
    (data_dir / "demo_key").chmod(0o644)
    said, second = demo_key()
    assert second != first and "issued" in said
    assert ApiKey.objects.get(digest=digest_secret(second)).is_active
    assert (data_dir / "demo_key").read_text().strip() == second
    assert stat.S_IMODE((data_dir / "demo_key").stat().st_mode) == 0o600


def test_make_run_with_its_address_taken_sets_up_and_issues_nothing(tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        # --assume-old: the venv is the test's own; make must not reinstall it here.
        done = subprocess.run(["make", "--no-print-directory", "--assume-old=.venv/.installed", "run",
                               f"BIND={address}"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                              env={**os.environ, "GATEWAY_DATA_DIR": str(tmp_path), "DATABASE_URL": ""})
    assert done.returncode != 0
    assert f"{address} is in use (is the gateway already running?)" in done.stdout
    assert list(tmp_path.iterdir()) == []  # no database migrated, no demo key issued or kept


def test_the_demo_key_may_call_every_local_model_and_the_readme_names_its_tier(data_dir, seeded):
    # The demo is for trying every operation without upstream credentials: a tier that may not call
    # local-image or local-speech would answer 403 to half of them.
    demo_key()
    tier = ApiKey.objects.get().tier
    local = [model for model in seeded.models.values() if model.model_id.startswith("local-")]
    assert {model.type for model in local} == {"chat", "image", "speech", "embedding"}
    assert [model.model_id for model in local if not model.allows_tier(tier)] == []
    readme = (ROOT / "README.md").read_text()
    assert re.findall(r"demo key \(tier (\w+)", readme) == [tier]
