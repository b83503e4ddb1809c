"""What reading a Messages request into chat parameters left out or cannot honour (``Translation``), and
the 400 the reading raises for a member that is not what Anthropic's API takes."""
import re
from dataclasses import dataclass, field

from utils_app.errors import InvalidRequest, UnsupportedParameter

# What X-Gateway-Ignored may say of one request: names of at most NAME_MAX characters of letters, digits and
# _ . : - (any other becomes _), at most NAMES_MAX of them, then MORE.
NOT_IN_A_NAME = re.compile(r"[^A-Za-z0-9_.:-]")
NAME_MAX = 100
NAMES_MAX = 64
MORE = "more"


def need(condition: bool, where: str, message: str) -> None:
    if not condition:
        raise InvalidRequest(f"{where}: {message}", param=where)


def _unsupported(param: str, why: str) -> UnsupportedParameter:
    return UnsupportedParameter(f"{param}: {why}", param=param)


@dataclass
class Translation:
    """What reading a Messages request into chat parameters left out, by the names X-Gateway-Ignored gives
    them (``dropped``), and the client's member that OpenAI's reasoning_effort stands for, so that an
    upstream which cannot think either is named by the client's word for it."""

    dropped: list[str] = field(default_factory=list)
    reasoning_from: str | None = None
    tools_left_out: set[str] = field(default_factory=set)  # the names of the tools left out
    # A block only Anthropic's API can read and nothing can stand in for (an image by file id): refused by
    # every other type, so the request goes to an anthropic deployment of the pool, or is this 400.
    refusal: UnsupportedParameter | None = None

    def refuse(self, param: str, why: str) -> None:
        self.refusal = self.refusal or _unsupported(param, why)

    def drop(self, name: str) -> None:
        # A name comes from the client's body (a member, a tool's type or name) and goes into a header and a
        # log line: only a bounded word of safe characters, and a bounded number of names.
        name = NOT_IN_A_NAME.sub("_", name[:NAME_MAX])
        if name in self.dropped:
            return
        if len(self.dropped) < NAMES_MAX:
            self.dropped.append(name)
        elif self.dropped[-1] != MORE:
            self.dropped.append(MORE)

    def extras(self, block: dict, known: tuple[str, ...], where: str) -> None:
        """Name a block's members that nothing reads: a cache mark as ``cache_control`` (there is one on
        most of Claude Code's blocks), any other by its dotted path."""
        for member in block:
            if member not in known:
                self.drop("cache_control" if member == "cache_control" else f"{where}.{member}")
