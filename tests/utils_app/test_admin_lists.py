"""The staff lists' row-id guard (utils_app.admin): which texts name a row no bigint can hold."""
import pytest

from utils_app.admin import _past_a_bigint

ZEROS = "0" * 100_000  # a run of zeros the guard reads once: no backtracking between two ways to match it


@pytest.mark.parametrize(("value", "past"), [
    ("7", False), (str(2**63 - 1), False), (str(2**63), True), (f"-{2**63}", True), ("9" * 5000, True),
    (f" +{ZEROS}{2**63 - 1} ", False), (f"{ZEROS}{2**63}", True), (ZEROS, False), ("0", False),
    (f"{ZEROS}x", False), ("", False), ("12a", False), ("+", False),
])
def test_a_row_id_is_past_a_bigint_by_its_digits_past_any_leading_zeros(value, past):
    assert _past_a_bigint(value) is past
