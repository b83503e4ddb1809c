"""Stored media: serving it, and `manage.py purge_media`."""
import os
import time
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from gateway import media


def store(kind: str, extension: str, *, age_hours: float, content: bytes = b"data") -> str:
    name = media.save(content, kind=kind, extension=extension)
    moment = time.time() - age_hours * 3600
    os.utime(media.root() / name, (moment, moment))
    return name


def purge(*args) -> str:
    out = StringIO()
    call_command("purge_media", *args, stdout=out)
    return out.getvalue()


def test_purge_deletes_files_past_the_age_and_keeps_the_rest(settings):
    old_image = store("images", "png", age_hours=30, content=b"x" * 10)
    old_audio = store("audio", "wav", age_hours=25, content=b"y" * 5)
    fresh = store("images", "png", age_hours=1)
    output = purge("--older-than", "24")
    assert "Deleted 2 file(s), 15 bytes, older than 24 hour(s)" in output
    assert not (media.root() / old_image).exists()
    assert not (media.root() / old_audio).exists()
    assert (media.root() / fresh).exists()


def test_a_dry_run_reports_without_deleting(settings):
    old = store("images", "png", age_hours=48)
    output = purge("--older-than", "24", "--dry-run")
    assert output.startswith("Would delete 1 file(s)")
    assert (media.root() / old).exists()


def test_the_default_age_is_the_retention_setting(settings):
    settings.MEDIA_RETENTION_HOURS = 2
    old = store("audio", "wav", age_hours=3)
    kept = store("audio", "wav", age_hours=1)
    # The default is read when the command's parser is built, so it follows the setting.
    purge()
    assert not (media.root() / old).exists()
    assert (media.root() / kept).exists()


def test_purge_with_no_media_folder_deletes_nothing(settings):
    assert "Deleted 0 file(s), 0 bytes" in purge("--older-than", "1")


def test_a_negative_age_is_refused(settings):
    with pytest.raises(CommandError):
        purge("--older-than", "-1")


def test_stored_files_are_served_with_their_type_and_a_long_cache_lifetime(client, settings):
    name = store("audio", "mp3", age_hours=0, content=b"ID3")
    response = client.get(f"/media/{name}")
    assert response.status_code == 200
    assert response["Content-Type"] == "audio/mpeg"
    assert "immutable" in response["Cache-Control"]
    assert b"".join(response.streaming_content) == b"ID3"


def test_media_answers_only_get(client, settings):
    name = store("images", "png", age_hours=0)
    response = client.post(f"/media/{name}")
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"


def test_a_purged_file_is_gone_from_its_url(client, settings):
    name = store("images", "png", age_hours=50)
    purge("--older-than", "24")
    assert client.get(f"/media/{name}").json()["error"]["code"] == "media_not_found"
