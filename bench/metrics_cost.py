"""What counting one metered request costs in prometheus_client's multiprocess mode.

    .venv/bin/python bench/metrics_cost.py [--rounds 2000]

Times, with timeit, the metric updates of one completed, non-streamed request (the
response, the upstream call, the settlement, the answer) in a fresh process whose
PROMETHEUS_MULTIPROC_DIR is a temporary folder, as under gunicorn. Prints the best
per-request time of five repeats; the figure goes to docs/performance.md.
"""
import argparse
import os
import sys
import tempfile
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def one_request(metrics) -> None:
    metrics.response_ready(operation="chat-completions", seconds=0.01, upstream_seconds=0.008)
    metrics.upstream_called(provider="local", seconds=0.008)
    metrics.settled(model="local-chat", credits=1, input_tokens=12, output_tokens=30)
    metrics.request_answered(operation="chat-completions", model="local-chat", status=200)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gw_metrics_") as folder:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = folder
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway.settings")
        sys.path.insert(0, str(ROOT))
        import django

        django.setup()
        from utils_app import metrics

        rounds = max(100, min(args.rounds, 100_000))
        best = min(timeit.repeat(lambda: one_request(metrics), number=rounds, repeat=5)) / rounds
        print(f"metrics per metered request: {best * 1e6:.1f} µs (best of 5 × {rounds})")


if __name__ == "__main__":
    main()
