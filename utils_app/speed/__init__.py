"""The request path's speed tricks, a module each, each kept only while a benchmark shows it pays.

Each trick has a plain twin (the ordinary way: DRF's own validation, redis-py's pipeline, Django's
cursor, requests' session), a switch that picks one or the other (a setting of gateway/settings.py,
on by default), a test that runs the same work through both and compares what comes out
(tests/utils_app/test_speed*.py, tests/utils_app/test_http.py, tests/gateway/test_statements_alone.py),
and one bench run that serves the gateway with each switch off in turn against it with all on
(bench/request_cpu.py --tricks). docs/performance.md has the figures and the rule: a trick stays
while it saves 2 % or more of the machine's CPU per metered request, served.

- validation: the strict request serializers validated in one pass (SPEED_ONE_PASS_VALIDATION);
- redis_round_trip: the limits' Redis round trip on a connection of its own (SPEED_REDIS_ROUND_TRIP);
- statements: the metered statements alone on pooled connections (SPEED_STATEMENTS_ALONE);
- libpq: those statements sent straight through libpq instead of psycopg's cursor (SPEED_LIBPQ);
- upstream_pool: a model call straight through urllib3's pool (SPEED_UPSTREAM_POOL).

No library or standard module is patched here: each trick is a subclass, a method of our own, or
a call of its own beside the library's.
"""
