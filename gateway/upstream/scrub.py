"""Upstream text made safe to pass on: every secret the gateway holds, the secret just sent and the
upstream's address taken out, in whatever form an upstream may quote them (HttpTransport.clean runs it
on the upstream text that may reach a client: error messages and codes)."""
import base64
import functools
import os
import re
from urllib.parse import urlsplit

from django.conf import settings

from models_catalog.served import secret_env_allowed

# Shorter values are not looked for in upstream text: replacing every "1" or "abc" would garble it,
# and a secret that short protects nothing anyway.
MIN_SCRUBBED_SECRET = 8


def held_secrets() -> set[str]:
    """Every secret this gateway holds that an upstream could have seen or guessed: each upstream
    secret variable's value (every provider's, not only the one called) and the service's own."""
    values = {value for name, value in os.environ.items() if secret_env_allowed(name)}
    database = settings.DATABASES["default"].get("PASSWORD") or ""
    values |= {settings.SECRET_KEY, settings.DISCORD_BOT_TOKEN, settings.METRICS_TOKEN, database}
    return {value.strip() for value in values if len(value.strip()) >= MIN_SCRUBBED_SECRET}


def scrub(text: str, secret: str = "", base_url: str = "") -> str:
    """Upstream text with every held secret, the secret just sent and the upstream's address taken out,
    in the forms an upstream may quote them in (``_secret_forms``, ``_address_forms``).

    Runs only on the way out of a failure (an error message, a stream's error event), never per chunk;
    each secret's pattern and each address's is compiled once.
    """
    secrets = held_secrets() | {value.strip() for value in (secret, _url_password(base_url))
                                if len(value.strip()) >= MIN_SCRUBBED_SECRET}
    for needle in sorted(secrets, key=len, reverse=True):  # a secret that holds another goes whole
        text = _secret_pattern(needle).sub("[redacted]", text)
    pattern = _address_pattern(base_url) if base_url else None
    return pattern.sub("[upstream]", text) if pattern is not None else text


# Between two characters of a quoted secret: what splits it without being part of it (whitespace and line
# breaks, escaped ones too, quotes and the + that joins quoted pieces), up to 8 at a time. A character of the
# secret itself is left out, so that each run of them can be read one way only: the pattern never
# backtracks, whatever text an upstream crafts.
_SPLIT_CHARACTERS = " \t\r\n\f\v\"'`+"
# Between two characters of base64: a line break (MIME wraps base64 at 76 characters), or an escaped one.
_BASE64_BREAK = r"(?:\r?\n|\\r?\\n)?"
# A host name shorter than this is not looked for alone (its host:port and URL still are).
MIN_SCRUBBED_HOST = 4


def _written(character: str, *, escaped: bool = True) -> str:
    """A pattern for one character as it is (the patterns are case-insensitive), percent-encoded, or
    (``escaped``) as a JSON escape."""
    ways = [re.escape(character), "".join(f"%{byte:02x}" for byte in character.encode())]
    if escaped and ord(character) < 0x10000:
        ways.append(f"\\\\u{ord(character):04x}")
    return f"(?:{'|'.join(ways)})"


def _secret_forms(secret: str) -> list[str]:
    """Patterns for the secret written out, longest first (where two start at the same place, the whole of
    the longer one goes): the secret itself, each character in any of its ways and the secret split anywhere;
    and its base64 in both alphabets, each symbol as it is or percent-encoded and the text wrapped anywhere:
    alone (its padding says nothing), and the symbols that encode only its bytes where it stands inside a
    longer base64 text (as in a Basic header), at each of the three places a byte can take in a 3-byte group."""
    separators = re.escape("".join(character for character in _SPLIT_CHARACTERS if character not in secret))
    split = rf"(?:[{separators}]|\\[nrt]){{0,8}}" if separators else r"(?:\\[nrt]){0,8}"
    raw = secret.encode()
    encodings = set()
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        encodings.add(encode(raw).decode().rstrip("="))
        for offset in (0, 1, 2):
            encoded = encode(bytes(offset) + raw).decode()
            encodings.add(encoded[-(-8 * offset // 6):8 * (offset + len(raw)) // 6])
    forms = [(len(secret), split.join(_written(character) for character in secret))]
    forms += [(len(encoded), _BASE64_BREAK.join(symbol if symbol.isalnum() else _written(symbol, escaped=False)
                                                for symbol in encoded)) for encoded in encodings]
    return [pattern for _, pattern in sorted(forms, key=lambda form: -form[0])]


@functools.lru_cache(maxsize=64)
def _secret_pattern(secret: str) -> re.Pattern[str]:
    """One secret's forms as one case-insensitive pattern, compiled once per process."""
    return re.compile("|".join(_secret_forms(secret)), re.IGNORECASE)


def _address_forms(base_url: str) -> set[str]:
    """The upstream's base URL, its origin, its host:port (the default port too) and its host name."""
    parts = urlsplit(base_url.strip())
    forms = {base_url.strip().rstrip("/")}
    host = parts.hostname or ""
    try:
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        port = None
    if host:
        netloc = f"[{host}]" if ":" in host else host
        forms |= {f"{parts.scheme}://{netloc}", f"{netloc}:{port}" if port else netloc}
        if len(host) >= MIN_SCRUBBED_HOST:
            forms.add(host)
    return {form for form in forms if form}


@functools.lru_cache(maxsize=32)
def _address_pattern(base_url: str) -> re.Pattern[str] | None:
    forms = _address_forms(base_url)
    if not forms:
        return None
    return re.compile("|".join("".join(_written(character, escaped=False) for character in form)
                               for form in sorted(forms, key=len, reverse=True)), re.IGNORECASE)


def _url_password(url: str) -> str:
    """The password of a base URL that carries one (``https://user:pass@host``): a secret too."""
    try:
        return urlsplit(url).password or ""
    except ValueError:
        return ""
