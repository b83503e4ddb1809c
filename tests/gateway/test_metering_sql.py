"""The metering statements' text (gateway.metering_sql): each rule written once, every statement made from it.

What the statements do is tested through the requests and the ledger (test_ledger_path, test_metering_groups,
test_statements_alone...); these tests hold the shape that keeps those rules in one place.
"""
from gateway import metering_sql as sql


def test_the_settlement_alone_and_the_group_settle_with_the_very_same_writes():
    settlement = sql._settlement_ctes()
    assert settlement in sql.SETTLEMENT and settlement in sql.GROUP_STATEMENT


def test_a_grouped_charge_differs_from_a_charge_alone_only_by_the_keys_the_group_locked():
    alone, grouped = sql._charge_ctes(grouped=False), sql._charge_ctes(grouped=True)
    assert alone in sql.CHARGE and grouped in sql.GROUP_STATEMENT
    assert grouped.replace(", locked", "").replace("locked.id = c.key AND ", "") == alone


def test_a_request_alone_brings_its_values_as_parameters_and_a_group_as_one_array_per_value():
    for column, kind in sql.CHARGE_VALUES:
        assert f"%({column})s::{kind} AS {column}" in sql.CHARGE
        assert f"%(c_{column})s::{kind}[]" in sql.GROUP_STATEMENT
    for column, kind in sql.SETTLEMENT_VALUES:
        assert f"%({column})s::{kind} AS {column}" in sql.SETTLEMENT
        assert f"%(s_{column})s::{kind}[]" in sql.GROUP_STATEMENT


def test_only_a_group_skips_the_key_rows_another_transaction_holds():
    assert "SKIP LOCKED" in sql.GROUP_STATEMENT
    assert "SKIP LOCKED" not in sql.CHARGE and "SKIP LOCKED" not in sql.SETTLEMENT


def test_the_refund_gives_back_by_the_settlements_rule_and_counts_no_tokens():
    given = sql._given("%(give)s", postgres=True)
    assert f"credits = k.credits + {given}" in sql.REFUND
    assert "tpm_used" not in sql.REFUND and "tpm_used" in sql.SETTLEMENT
    assert f"credits = k.credits + {sql._given('%(give)s', postgres=False)}" in sql.REFUND_SQLITE


def test_sqlite_takes_and_records_with_the_same_definitions_as_postgresql():
    assert sql._TAKE_WHERE.format(k="", amount="%(amount)s", tier="%(tier)s") in sql.CHARGE_SQLITE[0]
    assert sql._TAKE_WHERE.format(k="k.", amount="c.amount", tier="c.tier") in sql.CHARGE
    postgres_columns, _ = sql._usage_row(lambda name: name)
    sqlite_columns, _ = sql._usage_row(sql.param)
    assert postgres_columns == sqlite_columns and f"({sqlite_columns})" in sql.SETTLEMENT_SQLITE[2]
