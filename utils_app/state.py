"""What this process remembers between requests, and one call that forgets all of it (tests).

The window counters, the key cache, the catalog snapshot, routing's pending figures, the refused
addresses, the metrics' counts and the clock are each kept by the module that uses them; each
module hands its own forgetting function to ``on_reset`` when it is imported, so ``reset`` forgets
whatever state the process has without this module importing any layer above it.
"""
from collections.abc import Callable

_forgetters: list[Callable[[], object]] = []


def on_reset(forget: Callable[[], object]) -> Callable[[], object]:
    """Have ``reset`` call ``forget`` (usable as a decorator); a function is registered once."""
    if forget not in _forgetters:
        _forgetters.append(forget)
    return forget


def reset() -> None:
    """Forget every registered piece of process state: each test starts from a fresh process's."""
    for forget in _forgetters:
        forget()
