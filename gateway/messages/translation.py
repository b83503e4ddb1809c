"""What reading a Messages request into chat parameters left out or cannot honour (``Translation``), and
the 400 the reading raises for a member that is not what Anthropic's API takes."""
from dataclasses import dataclass, field

from gateway.upstream.base import MORE, NAMES_MAX, ignored_name
from utils_app.errors import InvalidRequest, UnsupportedParameter


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
        # A name comes from the client's body (a member, a tool's type or name): bounded as the header's are,
        # and so is the number of names kept while the request is read.
        name = ignored_name(name)
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
