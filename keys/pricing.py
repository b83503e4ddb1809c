"""The price of a token-priced request (CONTRACT section 12), in whole credits, from exact integers; and
the check ``reconcile`` makes of settled rows.

A unit price is credits per million tokens with at most six decimals (the catalog's and the ledger's
columns), so it is held here as an integer count of millionths of a credit per million tokens: the
tokens times those integers, divided by 10^12 and rounded up once, is the price's token part with
no float ever involved. The same function prices the hold before the call (the gateway's own count
of the input and the request's output cap), the settlement after it (the upstream's usage) and the
check ``reconcile`` makes of every settled row, so the three can never disagree.
"""
from dataclasses import dataclass
from decimal import Decimal

MICRO = 1_000_000  # millionths of a credit in a credit
PER = 1_000_000  # tokens a unit price is quoted for


def micro(price: Decimal | int | str | None) -> int:
    """A unit price (credits per million tokens, at most six decimals) as an integer of millionths."""
    if price is None:
        return 0
    exact = Decimal(price) * MICRO
    whole = int(exact)
    if whole != exact or whole < 0:
        raise ValueError(f"a unit price must be a number >= 0 with at most six decimals, not {price!r}")
    return whole


@dataclass(frozen=True)
class TokenPrices:
    """A token-priced charge's terms: the request fee (the model's ``cost``, per choice) and the unit prices
    in millionths of a credit per million tokens (``cached_input`` already defaulted to ``input``)."""

    request_fee: int
    input: int
    cached_input: int
    output: int

    @classmethod
    def of(cls, *, request_fee: int, input: Decimal | int | str | None, cached_input: Decimal | int | str | None,
           output: Decimal | int | str | None) -> "TokenPrices":
        return cls(request_fee=request_fee, input=micro(input),
                   cached_input=micro(input if cached_input is None else cached_input), output=micro(output))

    def price(self, *, input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> int:
        """The request fee plus the tokens' part rounded up once; ``cached_tokens`` are part of the input."""
        cached = min(max(cached_tokens, 0), input_tokens)
        millionths = ((input_tokens - cached) * self.input + cached * self.cached_input
                      + output_tokens * self.output)
        return self.request_fee + -(-millionths // (MICRO * PER))

    def as_decimals(self) -> tuple[Decimal, Decimal, Decimal]:
        """The unit prices as the ledger's columns keep them (credits per million tokens)."""
        return Decimal(self.input) / MICRO, Decimal(self.cached_input) / MICRO, Decimal(self.output) / MICRO


# ---------------------------------------------------------------- the proof (reconcile)

@dataclass(frozen=True)
class Mispriced:
    """A settled charge whose amount does not follow from its tokens, its terms and its hold."""

    entry: int
    prefix: str
    price: int
    held: int
    charged: int
    uncovered: int

    def __str__(self):
        return (f"{self.prefix}…: charge {self.entry} held {self.held} and its price is {self.price}, but it was "
                f"charged {self.charged} with {self.uncovered} uncovered")


def mispriced(*, prefix: str = "") -> list[Mispriced]:
    """Completed charges whose price, recomputed from the row alone (its tokens, request fee and unit prices,
    as charged then: a later catalog change never moves it), is not what the row says: charged the price
    up to the hold (more only where the key's maxCredits refused part of the give-back), uncovered what
    the price passed the hold by. A charge priced by its model's cost alone keeps its whole hold."""
    from keys.models import LedgerEntry  # keys.models needs nothing of this module; the import stays one-way

    rows = LedgerEntry.objects.filter(kind=LedgerEntry.CHARGE, status=LedgerEntry.COMPLETED, held__isnull=False)
    if prefix:
        rows = rows.filter(key__prefix__startswith=prefix)
    found = []
    for (entry, key_prefix, amount, hold, uncovered, input_tokens, cached_tokens, output_tokens, fee, price_input,
         price_cached_input, price_output) in rows.order_by("id").values_list(
            "id", "key__prefix", "amount", "held", "uncovered", "input_tokens", "cached_tokens", "output_tokens",
            "request_fee", "price_input", "price_cached_input", "price_output").iterator(chunk_size=2000):
        held = hold or 0  # never NULL here: the query keeps rows with a hold
        if price_input is None and price_output is None:
            price, right = held, -amount == held and uncovered == 0
        else:
            terms = TokenPrices.of(request_fee=fee or 0, input=price_input, cached_input=price_cached_input,
                                   output=price_output)
            price = terms.price(input_tokens=input_tokens or 0, output_tokens=output_tokens or 0,
                                cached_tokens=cached_tokens or 0)
            right = min(price, held) <= -amount <= held and uncovered == max(0, price - held)
        if not right:
            found.append(Mispriced(entry=entry, prefix=key_prefix, price=price, held=held, charged=-amount,
                                   uncovered=uncovered))
    return found
