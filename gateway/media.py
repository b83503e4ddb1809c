"""Generated images and audio kept on disk under settings.MEDIA_ROOT and served by the service.

Files are named by 32 random bytes, so a URL is a capability: whoever holds it may
fetch the file, nobody can guess another one, and no key is needed to load an
image in a browser. They are deleted after a retention period by the
``purge_media`` command (run it from cron).
"""
import os
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from django.conf import settings

KINDS = ("images", "audio")
CONTENT_TYPES = {
    "png": "image/png", "jpg": "image/jpeg", "webp": "image/webp", "gif": "image/gif",
    "mp3": "audio/mpeg", "opus": "audio/ogg", "aac": "audio/aac", "flac": "audio/flac",
    "wav": "audio/wav", "pcm": "audio/pcm",
}
EXTENSIONS = {content_type: extension for extension, content_type in CONTENT_TYPES.items()}
# Only names this module writes are ever served: no dots, slashes or other folders.
NAME_RE = re.compile(rf"^({'|'.join(KINDS)})/[A-Za-z0-9_-]{{20,64}}\.({'|'.join(CONTENT_TYPES)})$")


def root() -> Path:
    return Path(settings.MEDIA_ROOT)


def save(content: bytes, *, kind: str, extension: str) -> str:
    """Store a generated file; returns its name relative to the media root (``images/….png``)."""
    if kind not in KINDS or extension not in CONTENT_TYPES:
        raise ValueError(f"cannot store {kind}/*.{extension}")
    folder = root() / kind
    folder.mkdir(parents=True, exist_ok=True)
    name = f"{secrets.token_urlsafe(32)}.{extension}"
    # Written under a temporary name and renamed, so a file is never served half-written.
    partial = folder / f".{name}.partial"
    partial.write_bytes(content)
    os.replace(partial, folder / name)
    return f"{kind}/{name}"


def url_for(name: str, *, request) -> str:
    """The absolute URL of a stored file: PUBLIC_BASE_URL when set, else the request's own address."""
    path = f"{settings.MEDIA_URL}{name}"
    if settings.PUBLIC_BASE_URL:
        return settings.PUBLIC_BASE_URL + path
    return request.build_absolute_uri(path)


def locate(name: str) -> tuple[Path, str] | None:
    """The file and content type behind a media name, or None when there is no such file."""
    if not NAME_RE.match(name):
        return None
    path = root() / name
    if not path.is_file():
        return None
    return path, CONTENT_TYPES[name.rsplit(".", 1)[1]]


def open_file(name: str) -> tuple[BinaryIO, str] | None:
    """The stored file opened for reading, with its content type; None when there is no such file.

    purge_media may delete a file between locate() and open(): a file that is gone
    by then is simply not there (a 404, not a 500). Once open, it stays readable to
    the end even if it is deleted meanwhile.
    """
    found = locate(name)
    if found is None:
        return None
    path, content_type = found
    try:
        return path.open("rb"), content_type
    except (FileNotFoundError, IsADirectoryError):
        return None


@dataclass(frozen=True)
class PurgeReport:
    files: int
    bytes: int


def purge(*, older_than_hours: float, dry_run: bool = False) -> PurgeReport:
    """Delete stored files (and abandoned partial writes) older than the given age."""
    cutoff = time.time() - older_than_hours * 3600
    files = size = 0
    for kind in KINDS:
        folder = root() / kind
        if not folder.is_dir():
            continue
        with os.scandir(folder) as entries:
            for entry in entries:
                if not entry.is_file(follow_symlinks=False):
                    continue
                stat = entry.stat(follow_symlinks=False)
                if stat.st_mtime >= cutoff:
                    continue
                if not dry_run:
                    try:
                        os.unlink(entry.path)
                    except FileNotFoundError:  # another purge got there first
                        continue
                files += 1
                size += stat.st_size
    return PurgeReport(files=files, bytes=size)
