"""Each speed trick of utils_app.speed returns what its plain twin returns: the same work is run with its
switch on and off (SPEED_*, gateway/settings.py) and what comes out compared."""
import pytest
from django.conf import settings
from django.core.cache import cache, caches
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from rest_framework import serializers as drf_serializers

from gateway.chat_serializers import ChatCompletionRequest
from utils_app.speed.redis_round_trip import ScriptedRedisCache
from utils_app.speed.validation import NOT_QUICK

PAYLOADS = [
    {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    {"model": "m", "messages": [{"role": "system", "content": "be terse"}, {"role": "user", "content": "hi"}],
     "temperature": 0.5, "max_tokens": 7, "stream": True, "stream_options": {"include_usage": True}},
    {"model": "m", "messages": []},
    {"model": "m", "messages": [{"role": "user", "content": 5}]},
    {"model": "m", "messages": [{"role": "user", "content": "hi", "surprise": 1}]},
    {"model": "m", "messages": "hello"},
    {"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": "hot"},
    {"model": "m", "messages": [{"role": "user", "content": "hi"}], "n": None, "max_tokens": None},
    {"messages": [{"role": "user", "content": "hi"}]},
    {"model": "m", "input": "text", "dimensions": 8},
    {"model": "m", "prompt": "a cat", "n": 2, "size": "256x256"},
    {"model": "m", "prompt": "a cat", "size": "huge"},
    [],
    # Messages with members left out, given as null, misspelt, or wrong in several places at once.
    {"model": "m", "messages": [{"role": "assistant", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"}], "tools": [
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}], "tool_choice": "auto"},
    {"model": "m", "messages": [{"role": "tool", "content": "x"}]},
    {"model": "m", "messages": [{"role": "user"}]},
    {"model": "m", "messages": [{"role": "user", "content": None, "name": None}]},
    {"model": "m", "messages": [{"role": "wizard", "content": 3, "name": 7}], "temperature": 9, "n": 0,
     "stop": 5},
    {"model": 5, "messages": [{"content": "hi"}], "stream_options": {"include_usage": True}},
    {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": False,
     "stream_options": {"include_usage": True}},
    {"model": "m", "input": ["a", "b"], "encoding_format": "float", "user": None},
    {"model": "m", "input": "text", "speed": 2.0, "voice": "alloy"},
    {"model": None, "input": None},
    {},
]


def _outcome(serializer_class, payload, *, copied=False, **plain):
    serializer = serializer_class.with_data(payload) if copied else serializer_class(data=payload, **plain)
    valid = serializer.is_valid()
    # Items, in order: the same members in the same order, the same errors in the same order.
    return valid, _ordered(serializer.validated_data if valid else serializer.errors)


def _ordered(value):
    if isinstance(value, dict):
        return [(name, _ordered(item)) for name, item in value.items()]
    if isinstance(value, list):
        return [_ordered(item) for item in value]
    return value, getattr(value, "code", None)


def _request_serializers():
    """Every StrictSerializer of the project (the request bodies of the API and the admin API)."""
    import gateway.deployment_views  # noqa: F401 - defines some
    import keys.serializers  # noqa: F401 - defines some
    from utils_app.serializers import StrictSerializer

    found, todo = [], [StrictSerializer]
    while todo:
        for sub in todo.pop().__subclasses__():
            found.append(sub)
            todo.append(sub)
    return sorted(found, key=lambda cls: cls.__qualname__)


@pytest.mark.parametrize("serializer_class", _request_serializers(), ids=lambda cls: cls.__qualname__)
@pytest.mark.parametrize("payload", PAYLOADS)
def test_shared_fields_and_given_fields_only_validate_exactly_as_drfs_own_path(serializer_class, payload):
    # A context makes SharedFields build the fields per instance and GivenFieldsOnly visit every
    # field, as plain DRF does.
    shared = _outcome(serializer_class, payload)
    plain = _outcome(serializer_class, payload, context={"plain": True})
    assert shared == plain
    assert _outcome(serializer_class, payload, copied=True) == plain  # SharedFields.with_data
    _assert_quick_agrees(serializer_class, payload)


def _validated(serializer_class, payload):
    """What the request path makes of ``payload``: (validated data and the names sent) or the errors."""
    try:
        data, sent = serializer_class.with_data(payload).validated()
    except drf_serializers.ValidationError as exc:
        return "refused", _ordered(exc.detail)
    return _ordered(data), sorted(sent)


@pytest.mark.parametrize("serializer_class", _request_serializers(), ids=lambda cls: cls.__qualname__)
def test_the_one_pass_validation_gives_what_drfs_own_gives_with_its_switch_off(serializer_class, settings):
    settings.SPEED_ONE_PASS_VALIDATION = True
    quick = [_validated(serializer_class, payload) for payload in PAYLOADS]
    settings.SPEED_ONE_PASS_VALIDATION = False
    plain = [_validated(serializer_class, payload) for payload in PAYLOADS]
    assert quick == plain
    made = serializer_class.with_data(PAYLOADS[0])  # off: DRF's constructor and fields of its own
    assert made.fields is not serializer_class.with_data(PAYLOADS[0]).fields


def _assert_quick_agrees(serializer_class, payload) -> bool:
    """The quick path (QuickSerializer) returns DRF's validated data, in order, or gives the body to DRF;
    never a value for a body DRF refuses. Returns whether it vouched for the body."""
    plain = serializer_class(data=payload, context={"plain": True})
    valid = plain.is_valid()
    serializer = serializer_class.with_data(payload)
    quick = serializer._quick()
    if quick is None:
        return False
    try:
        found = quick.run(payload, serializer)
    except NOT_QUICK:
        return False
    assert valid, f"the quick path let through what DRF refuses: {plain.errors}"
    assert _ordered(found) == _ordered(plain.validated_data)
    return True


def test_a_valid_chat_body_is_validated_once_by_the_quick_path(monkeypatch):
    calls = []
    original = drf_serializers.Serializer.run_validation

    def counting(self, data=drf_serializers.empty):
        calls.append(type(self).__name__)
        return original(self, data)

    monkeypatch.setattr(drf_serializers.Serializer, "run_validation", counting)
    for payload in (PAYLOADS[0], PAYLOADS[1], PAYLOADS[7]):
        expected = ChatCompletionRequest(data=payload, context={"plain": True})
        assert expected.is_valid()
        calls.clear()
        data, sent = ChatCompletionRequest.with_data(payload).validated()
        assert calls == []  # neither the request's nor a message's DRF validation ran
        assert data == dict(expected.validated_data) and list(data) == list(expected.validated_data)
        assert sent == {name for name, value in payload.items() if value is not None}
    calls.clear()
    with pytest.raises(drf_serializers.ValidationError):
        ChatCompletionRequest.with_data(PAYLOADS[3]).validated()  # refused: DRF's path words the error
    assert calls[0] == "ChatCompletionRequest"


def test_the_quick_path_steps_aside_for_a_serializer_that_validates_its_own_way():
    from utils_app.serializers import StrictCharField, StrictSerializer

    class ReadsItsOwnWay(StrictCharField):
        def get_value(self, dictionary):
            return dictionary.get("alias", super().get_value(dictionary))

    class OwnGetValue(StrictSerializer):
        name = ReadsItsOwnWay()

    class OwnValidators(StrictSerializer):
        name = StrictCharField()

        class Meta:
            validators = [lambda attrs: None]

    class OwnToInternalValue(StrictSerializer):
        name = StrictCharField()

        def to_internal_value(self, data):
            return {**super().to_internal_value(data), "extra": 1}

    class Plain(StrictSerializer):
        name = StrictCharField()

    for kind in (OwnGetValue, OwnValidators, OwnToInternalValue):
        assert kind.with_data({"name": "x"})._quick() is None, kind.__name__
    assert Plain.with_data({"name": "x"})._quick() is not None
    assert OwnToInternalValue.with_data({"name": "x"}).validated()[0] == {"name": "x", "extra": 1}
    assert Plain(data={"name": "x"}, context={"plain": True})._quick() is None  # a context: DRF's path


_TEXT = st.one_of(st.sampled_from(["", " ", "hi", "m", "user", "gpt-4o", "x" * 300, "a\x00b", "\ud800", "é",
                                   " padded ", "bench-chat"]), st.text(max_size=12))
_SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-3, 300), st.floats(allow_nan=True), _TEXT)
_NAME = st.sampled_from(["m", "gpt-4o", "bench-chat", "Say hello.", "ünïcode ✓", "x" * 300])


def _mostly(good):
    """A value of the member's own kind (mostly in range), or, about one time in eight, anything at all."""
    return st.tuples(st.integers(0, 7), good, _SCALAR).map(lambda drawn: drawn[2] if drawn[0] == 7 else drawn[1])


_PART = st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url", 3])}, optional={"text": _SCALAR})
_TOOL_CALL = st.fixed_dictionaries({"id": _TEXT, "type": _TEXT, "function": st.just({"name": "f"})})
_MESSAGE = st.fixed_dictionaries({
    "role": _mostly(st.sampled_from(["system", "user", "assistant", "tool", "developer", "wizard"])),
    "content": _mostly(st.one_of(_NAME, _TEXT, st.lists(_PART, max_size=2)))}, optional={
    "name": _mostly(st.one_of(_NAME, _TEXT)), "tool_call_id": _mostly(st.one_of(_NAME, _TEXT)), "tool_calls": _mostly(st.lists(_TOOL_CALL, max_size=2)),
    "function_call": st.just({"name": "f", "arguments": "{}"}), "extra": _SCALAR})
# Every message-level surprise above is dropped, not refused; a request-level one is refused.
_CHAT = st.fixed_dictionaries({"model": _mostly(st.one_of(_NAME, _TEXT)),
                               "messages": _mostly(st.lists(_MESSAGE, min_size=1, max_size=3))}, optional={
    "stream": _mostly(st.booleans()),
    "stream_options": _mostly(st.fixed_dictionaries({}, optional={"include_usage": _mostly(st.booleans())})),
    "temperature": _mostly(st.one_of(st.floats(0, 2), st.integers(-1, 3))), "top_p": _mostly(st.floats(0, 1)),
    "max_tokens": _mostly(st.integers(-1, 10**7)), "n": _mostly(st.integers(0, 12)), "user": _mostly(st.one_of(_NAME, _TEXT)),
    "seed": _mostly(st.integers(-2**70, 2**70)), "stop": _mostly(st.one_of(_TEXT, st.lists(_TEXT, max_size=5))),
    "logprobs": _mostly(st.booleans()), "top_logprobs": _mostly(st.integers(-1, 22)),
    "parallel_tool_calls": _mostly(st.booleans())})


@hypothesis_settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=_CHAT)
def test_the_quick_path_agrees_with_drf_on_generated_chat_bodies(body):
    _assert_quick_agrees(ChatCompletionRequest, body)


def test_a_serializer_made_with_data_is_the_one_drf_makes_and_shares_no_state():
    made = ChatCompletionRequest(data=PAYLOADS[0])
    made.fields  # noqa: B018 - binds them, as validating does
    copied = ChatCompletionRequest.with_data(PAYLOADS[0])
    # All the same attributes and values but the counter DRF numbers each field it makes with.
    assert {**vars(copied), "_creation_counter": 0} == {**vars(made), "_creation_counter": 0}
    assert copied.fields is made.fields
    invalid, valid = ChatCompletionRequest.with_data(PAYLOADS[3]), ChatCompletionRequest.with_data(PAYLOADS[1])
    assert not invalid.is_valid() and valid.is_valid()
    assert valid.errors == {} and "messages" in invalid.errors
    assert valid.validated_data["max_tokens"] == 7 and invalid._validated_data == {}
    for one in (invalid, valid):
        assert one._context is not ChatCompletionRequest.__dict__["_prototype"]._context
    prototype = ChatCompletionRequest.__dict__["_prototype"]
    assert not hasattr(prototype, "initial_data") and not hasattr(prototype, "_errors")


def test_given_fields_only_visits_the_named_fields_and_those_acting_when_left_out(monkeypatch):
    visited = []
    fields = ChatCompletionRequest(data={}).fields
    for field in fields.values():
        original = field.run_validation

        def recording(data, field=field, original=original):
            visited.append(field.field_name)
            return original(data)

        monkeypatch.setattr(field, "run_validation", recording)
    ChatCompletionRequest(data={"model": "m", "messages": [], "max_tokens": 3}).is_valid()
    assert visited == ["model", "messages", "stream", "max_tokens"]  # stream: its default applies
    visited.clear()
    ChatCompletionRequest(data={"model": "m"}, context={"plain": True}).is_valid()
    assert len(visited) == 0  # the plain path has fields of its own, unpatched


def test_shared_fields_are_bound_once_per_class_and_plain_ones_per_instance():
    first, second = ChatCompletionRequest(data={}), ChatCompletionRequest(data={})
    assert first.fields is second.fields
    plain = ChatCompletionRequest(data={}, context={"plain": True})
    assert plain.fields is not first.fields
    assert plain.fields["messages"] is not first.fields["messages"]


def test_validation_leaves_the_shared_fields_as_they_were():
    fields = ChatCompletionRequest(data={}).fields
    before = {name: vars(field).copy() for name, field in fields.items()}
    for payload in PAYLOADS:
        _outcome(ChatCompletionRequest, payload)
    assert {name: vars(field) for name, field in fields.items()} == before


@pytest.mark.skipif(not settings.CACHES["default"]["BACKEND"].endswith(".ScriptedRedisCache"),
                    reason="needs REDIS_URL (the Redis cache); runs in .ci/run")
@pytest.mark.parametrize("own_connection", [True, False], ids=["round_trip", "redis-py pipeline"])
def test_run_script_answers_as_the_same_script_sent_with_plain_eval(own_connection, settings):
    import redis

    settings.SPEED_REDIS_ROUND_TRIP = own_connection

    assert isinstance(caches["default"], ScriptedRedisCache)
    source = "return {redis.call('incrby', KEYS[1], ARGV[1]), redis.call('incrby', KEYS[2], ARGV[2])}"
    keys = [cache.make_key("speed:a"), cache.make_key("speed:b")]
    plain = redis.Redis.from_url(settings.CACHES["default"]["LOCATION"])
    try:
        plain.delete(*keys)
        assert cache.run_script(source, keys=keys, args=[2, 3]) == ([2, 3], [])
        assert cache.run_script(source, keys=keys, args=[2, 3]) == ([4, 6], [])  # sent by its SHA now
        assert plain.eval(source, 2, *keys, 2, 3) == [6, 9]
        assert [int(plain.get(key)) for key in keys] == [6, 9]
        # Other commands ride in the same round trip, after the script.
        answer, rest = cache.run_script(source, keys=keys, args=[1, 1], commands=[("GET", keys[0])])
        assert answer == [7, 10] and rest == [b"7"]
        # A server that lost the script (a restart) gets it again; the other commands ran once.
        plain.script_flush()
        answer, rest = cache.run_script(source, keys=keys, args=[1, 1], commands=[("INCRBY", keys[1], 1)])
        assert answer == [8, 12] and rest == [11]
    finally:
        plain.delete(*keys)
        plain.close()


def test_the_limits_round_trip_uses_one_cache_object_per_process_until_caches_change(settings):
    """``caches[...]`` builds a backend object per context (per request, in a gevent worker); the round
    trips of the limits and of the routing's shared state take the process's one instead."""
    import threading

    from utils_app import shared

    seen = []
    threads = [threading.Thread(target=lambda: seen.append(shared.shared_cache())) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({id(backend) for backend in seen}) == 1 and seen[0] is shared.shared_cache()
    assert type(seen[0]) is type(caches["default"])
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                                   "LOCATION": "another"}}
    rebuilt = shared.shared_cache()
    assert rebuilt is not seen[0] and rebuilt._cache is caches["default"]._cache  # the new setting's store


@pytest.mark.skipif(not settings.CACHES["default"]["BACKEND"].endswith(".ScriptedRedisCache"),
                    reason="needs REDIS_URL (the Redis cache); runs in .ci/run")
def test_every_context_of_the_process_shares_one_redis_client():
    """Django keeps a cache object per context, and a gevent worker runs each request in its own: without
    one shared client each request opened a new Redis connection and loaded the script again."""
    import threading

    seen = []

    def use():
        from django.core.cache import caches

        own = caches["default"]
        seen.append((own, own._cache, own.client_for_write()))  # held, so no id is reused

    threads = [threading.Thread(target=use) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({id(own) for own, _, _ in seen}) == 3  # a cache object per context, as Django keeps them
    assert len({id(client) for _, client, _ in seen}) == 1 and len({id(redis) for _, _, redis in seen}) == 1


@pytest.mark.skipif(not settings.CACHES["default"]["BACKEND"].endswith(".ScriptedRedisCache"),
                    reason="needs REDIS_URL (the Redis cache); runs in .ci/run")
@pytest.mark.parametrize("own_connection", [True, False], ids=["round_trip", "redis-py pipeline"])
def test_round_trips_reuse_their_connection_and_get_past_one_the_server_closed(own_connection, settings):
    import redis
    from redis.exceptions import ResponseError

    settings.SPEED_REDIS_ROUND_TRIP = own_connection

    name = cache.make_key("speed:trips")
    plain = redis.Redis.from_url(settings.CACHES["default"]["LOCATION"])
    try:
        plain.delete(name)
        assert cache.round_trip([("INCRBY", name, 1)]) == [1]  # warm: this thread's connection exists now
        before = plain.info("stats")["total_connections_received"]
        for count in range(2, 12):
            assert cache.round_trip([("INCRBY", name, 1), ("GET", name)]) == [count, str(count).encode()]
        assert plain.info("stats")["total_connections_received"] == before  # no new connection
        # An error reply comes back in its place; the connection stays usable.
        replies = cache.round_trip([("HGETALL", name), ("INCRBY", name, 1)])
        assert isinstance(replies[0], ResponseError) and replies[1] == 12
        # The server ends every other client (a restart does as much): the next round trip still runs, once.
        plain.client_kill_filter(skipme=True)
        assert cache.round_trip([("INCRBY", name, 1)]) == [13]
        assert int(plain.get(name)) == 13
    finally:
        plain.delete(name)
        plain.close()


@pytest.mark.skipif(not settings.CACHES["default"]["BACKEND"].endswith(".ScriptedRedisCache"),
                    reason="needs REDIS_URL (the Redis cache); runs in .ci/run")
def test_a_round_trip_that_fails_midway_never_gives_its_connection_back(monkeypatch):
    name = cache.make_key("speed:broken")
    cache.round_trip([("DEL", name)])
    shared = cache._shared()
    idle_before = list(shared.idle)

    def cut_off(self, *args, **kwargs):
        raise KeyboardInterrupt  # what a killed greenlet or a signal looks like: after the send, before a reply

    monkeypatch.setattr(type(idle_before[-1]), "read_response", cut_off)
    with pytest.raises(KeyboardInterrupt):
        cache.round_trip([("INCRBY", name, 1)])
    monkeypatch.undo()
    taken = idle_before[-1]
    assert taken not in shared.idle and not taken.is_connected  # its reply may still be on the wire: dropped
    assert cache.round_trip([("GET", name)]) == [b"1"]  # the next one reads its own reply, not the lost one
    cache.round_trip([("DEL", name)])


ROUND_TRIP_COMMANDS = [
    ("EVALSHA", "0" * 40, 3, ":1:w:key:7:60:29", ":1:w:key:7:3600:0", ":1:key-version", 2, 61, 3601, "9f" * 16),
    ("SET", ":1:health", 0, "EX", 30, "NX"),
    ("INCRBY", ":1:health", 1),
    ("HINCRBY", ":1:h", "fail", -3),
    ("HMGET", ":1:h", "ok", "fail"),
    ("SET", ":1:ü-名前", "value with spaces", "PX", 1500),
    ("SET", ":1:bytes", b"\x00\xff\r\n", "PX", 1),
    ("SET", ":1:float", 1.5),
    ("DEL", ":1:gone"),
]


def test_round_trip_commands_are_packed_as_the_connection_packs_them():
    from redis.connection import Connection, PythonRespSerializer

    from utils_app.speed import redis_round_trip

    connection = Connection()  # never connected: packing needs no server
    redis_round_trip._load_hiredis()  # as the process's first Redis client does
    assert redis_round_trip._pack_command is not None, "hiredis is pinned in requirements.txt"
    expected = b"".join(connection.pack_commands(ROUND_TRIP_COMMANDS))
    assert redis_round_trip._packed(connection, ROUND_TRIP_COMMANDS) == [expected]
    for command in ROUND_TRIP_COMMANDS:
        assert redis_round_trip._packed(connection, [command]) == [b"".join(connection.pack_commands([command]))]
    # A value hiredis does not take goes to the connection: redis-py's own conversion, or its own error.
    odd = [("SET", ":1:view", memoryview(b"abc")), ("SET", ":1:array", bytearray(b"xyz"))]
    assert b"".join(redis_round_trip._packed(connection, odd)) == b"".join(connection.pack_commands(odd))
    from redis.exceptions import DataError

    with pytest.raises(DataError):
        redis_round_trip._packed(connection, [("SET", ":1:none", None)])
    # A connection that packs in Python (no hiredis serializer) packs for itself.
    connection._command_packer = PythonRespSerializer(6000, connection.encoder.encode)
    assert b"".join(redis_round_trip._packed(connection, ROUND_TRIP_COMMANDS)) == b"".join(
        connection.pack_commands(ROUND_TRIP_COMMANDS))


# ---------------------------------------------------------------- statements alone (utils_app.speed.statements)

@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_statement_run_alone_answers_the_same_on_the_pool_and_through_djangos_cursor(settings):
    """The same statements, answers, errors and query log with SPEED_STATEMENTS_ALONE on and off (Django's
    cursor logs the text it sent, with its plan's number once plans were renewed)."""
    import re
    from decimal import Decimal

    from django.db import ProgrammingError, connection
    from django.test.utils import CaptureQueriesContext

    from utils_app.db import release_connection
    from utils_app.speed.statements import statements_wrapper

    PLAN = re.compile(r" /\* plan \d+ \*/$")
    statements = [("SELECT %(x)s::int + 1, %(word)s || '!'", {"x": 1, "word": "é"}, False),
                  ("SELECT g, %(step)s * g FROM generate_series(1, 3) g", {"step": Decimal("0.5")}, True),
                  ("SELECT 1 WHERE false", {}, True),
                  ("SELECT %(keys)s::int8[]", {"keys": [1, None, 2**62]}, False)]

    def run():
        release_connection(connection)
        with CaptureQueriesContext(connection) as captured:
            answers = [statements_wrapper().run_alone(sql, params, every_row=every_row)
                       for sql, params, every_row in statements]
        try:
            statements_wrapper().run_alone("UPDATE no_such_table SET x = %(x)s", {"x": 1})
        except ProgrammingError as exc:
            answers.append(type(exc.__cause__).__name__)
        release_connection(connection)
        assert connection.pool.get_stats().get("requests_waiting", 0) == 0
        return answers, [PLAN.sub("", query["sql"]) for query in captured.captured_queries]

    settings.SPEED_STATEMENTS_ALONE = True
    alone = run()
    settings.SPEED_STATEMENTS_ALONE = False
    assert run() == alone
    assert alone[0][0] == ((2, "é!"), 1) and alone[0][-1] == "UndefinedTable"
