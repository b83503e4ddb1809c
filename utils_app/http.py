"""Outbound HTTP: one pooled session per upstream, the timeout pair, and failures as gateway errors.

The upstream model providers (gateway.providers), the community platform
(community.client) and the neko image source (utils_app.neko) all call out with
requests. What they have in common lives here; what is theirs stays with them
(a provider's whole-call deadline, byte caps and streaming; the platform's
Retry-After; neko's cached image pool).

A session is built once per upstream and shared by every thread of the process:

- a keep-alive pool about as large as a worker's thread count, so threads do not
  queue for a socket, and no automatic retries: each caller decides what a failure
  means (the next provider, a briefly cached failure, a 502);
- no cookies. One session serves every client, so a cookie set in one client's
  answer would travel with everyone's later requests. Keeping none also spares
  requests copying, matching and re-parsing them on every call: an upstream behind
  a CDN sets a couple on each answer, measured at some 0.3 ms of CPU per call;
- the environment (the proxy variables with NO_PROXY, REQUESTS_CA_BUNDLE) is read
  once, when the session is built, instead of on every request as requests does by
  default; ~/.netrc is never read, so no credential the service did not choose is sent.

Since such a session carries nothing per call but its headers, ``Upstreams.post`` sends a model
call straight through the urllib3 pool of the session's own adapter when SPEED_UPSTREAM_POOL is on
(utils_app.speed.upstream_pool), and through the session's own ``post`` otherwise.
"""
import json
import os
import re
import threading
from http.cookiejar import DefaultCookiePolicy

import requests
from requests.adapters import HTTPAdapter
from urllib3.exceptions import HTTPError as Urllib3Error
from urllib3.exceptions import ReadTimeoutError

from utils_app.json_body import strings_mapped
from utils_app.speed import upstream_pool

USER_AGENT = "model-gateway/1.0"
# Just past a multiple of 3 s, TCP's first retransmission: a lost SYN still gets its retry.
CONNECT_SECONDS = 3.05

# What a request, or reading its answer, raises when no usable answer arrives: refused,
# reset, timed out, cut short or badly compressed. requests wraps most of urllib3's and
# the socket's errors, but a body read straight from ``response.raw`` meets them bare.
TRANSPORT_ERRORS = (requests.RequestException, Urllib3Error, OSError)


class Upstreams:
    """One pooled session per upstream base URL, built on first use and shared by the threads."""

    def __init__(self, *, pool_size: int, hosts: int = 1, user_agent: str = USER_AGENT):
        self.pool_size = pool_size
        self.hosts = hosts  # how many hosts' pools are kept (a provider's own, plus image hosts)
        self.user_agent = user_agent
        self._sessions: dict[str, requests.Session] = {}
        self._pools = upstream_pool.Pools()
        self._lock = threading.Lock()

    def session(self, base_url: str) -> requests.Session:
        session = self._sessions.get(base_url)
        if session is None:
            with self._lock:
                session = self._sessions.get(base_url)
                if session is None:
                    session = self._sessions[base_url] = self._build(base_url)
        return session

    def post(self, base_url: str, url: str, *, data: bytes | str, headers: dict,
             timeout) -> "Answer | requests.Response":
        """What ``self.session(base_url).post(..., stream=True)`` sends, with redirects never followed; the
        answer's body is left unread. Straight through the urllib3 pool the session's adapter keeps
        for the upstream with the switch on (utils_app.speed.upstream_pool); through a proxy, or with
        the switch off, by requests' own path.

        Redirects are never followed: a model call's body (the user's prompt) and its credential
        are for the provider alone, and an upstream answering 307 to an internal address must not
        make the gateway post them there. The caller sees the 3xx and treats it as a failure.
        """
        session = self.session(base_url)
        body = data.encode() if isinstance(data, str) else data
        if session.proxies or not upstream_pool.enabled():
            return session.post(url, data=body, headers=headers, timeout=timeout, stream=True, allow_redirects=False)
        return Answer(self._pools.post(session, url, body=body, headers=headers, timeout=timeout))

    def _build(self, base_url: str) -> requests.Session:
        session = requests.Session()
        session.headers["User-Agent"] = self.user_agent
        session.cookies.set_policy(DefaultCookiePolicy(netscape=False, rfc2965=False))  # accepts none
        # What requests would merge in from the environment on every call, read once.
        session.trust_env = False
        session.proxies.update(requests.utils.get_environ_proxies(base_url or "http://localhost"))
        session.verify = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or True
        adapter = HTTPAdapter(pool_connections=self.hosts, pool_maxsize=self.pool_size, max_retries=0)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        return session


def timeouts(seconds: float, *, connect: float = CONNECT_SECONDS) -> tuple[float, float]:
    """requests' (connect, read) pair for waiting at most ``seconds``, connecting included."""
    return min(connect, seconds), seconds


def is_timeout(exc: BaseException) -> bool:
    """Whether a transport failure was the upstream taking too long (504) rather than failing (502)."""
    # requests reports a read timeout while loading a body as a ConnectionError wrapping
    # urllib3's ReadTimeoutError, so look one level down as well. TimeoutError is the
    # socket's own, met when reading ``response.raw`` directly.
    if isinstance(exc, (requests.Timeout, ReadTimeoutError, TimeoutError)):
        return True
    return any(isinstance(arg, ReadTimeoutError) for arg in getattr(exc, "args", ()))


# A UTF-16 surrogate can reach parsed JSON only as an escape (UTF-8 cannot carry one); a pair parses into
# one character, so any surrogate left in a string is a lone one: no character, which no UTF-8 can write.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_SURROGATE_ESCAPE_BYTES = re.compile(_SURROGATE_ESCAPE.pattern.encode())
_SURROGATE = re.compile("[\ud800-\udfff]")


def json_object(content: bytes | str) -> dict | None:
    """An upstream's answer (or one event of its stream) as a JSON object, or None when it is anything else.

    Not JSON, not UTF-8, nested past the recursion limit, or JSON but not an object:
    the caller turns None into its own 502, never a 500. A lone surrogate escape in a string is read
    as U+FFFD, as a UTF-8 decoder reads a broken sequence: kept, it could be neither stored nor
    written back to the client (it made a charged 500).
    """
    try:
        body = json.loads(content)
    except (ValueError, RecursionError):
        return None
    if not isinstance(body, dict):
        return None
    found = (_SURROGATE_ESCAPE_BYTES.search(content) if isinstance(content, bytes)
             else _SURROGATE_ESCAPE.search(content))
    if found is None:
        return body
    try:
        return strings_mapped(body, lambda text: _SURROGATE.sub("\ufffd", text))
    except RecursionError:
        return None


class Answer:
    """What the upstream transport reads of an answer, over urllib3's response: the part of
    requests.Response it uses (status, headers, the raw body, closing)."""

    def __init__(self, raw):
        self.raw = raw
        self.status_code = raw.status
        self.headers = raw.headers  # case-insensitive, as requests' are

    def close(self) -> None:
        # As requests does: a body read to its end has given its connection back to the pool already;
        # one left unread is dropped, so the upstream sees the close (a stream a client left).
        self.raw.close()
        self.raw.release_conn()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
