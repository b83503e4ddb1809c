"""The gateway's own token estimate (gateway.tokens): what usage records when an upstream reports none."""
from gateway import tokens


def test_count_tokens_is_never_zero_for_non_empty_text():
    assert tokens.count_tokens("a") == 1
    assert tokens.count_tokens("   ") == 1
    assert tokens.count_tokens("") == 0


def test_count_tokens_grows_with_the_text():
    short = tokens.count_tokens("Hello there.")
    longer = tokens.count_tokens("Hello there. " * 10)
    assert short == 3  # two words and a full stop
    assert longer == 10 * short
    assert tokens.count_tokens("internationalization") == 4  # long words cost more than one


def test_a_long_text_is_counted_in_a_thread_under_gevent_and_counts_the_same(as_under_gevent):
    big_text = "word, " * 20_000
    counted = tokens.count_tokens(big_text)
    assert as_under_gevent._pool is not None  # handed off
    assert counted == tokens.count_tokens_in_place(big_text) == 40_000
