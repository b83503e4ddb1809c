"""The target over many runs of bench/request_cpu.py: each round against its own floor, pooled.

    .venv/bin/python bench/pool_rounds.py RUN.json [RUN.json ...] [--resamples 4000] [--seed 27]

One run of request_cpu.py gives the median of a handful of rounds, and on a shared machine a
round's ratio to its floor moves by a tenth or more from one round to the next: one run's median
can land on either side of a target it is close to. This script reads the JSON several runs wrote
(request_cpu.py --out), pairs every gateway round with the floor of its own run, backend and round
(as request_cpu.py does), and reports per backend and served target, over all the rounds:

- the median of the rounds' CPU ratios (machine CPU per request, gateway / floor) and throughput
  ratios (gateway / floor), with a 90 % interval for each median from a two-level bootstrap:
  whole runs drawn again with replacement, then rounds within each drawn run (rounds of one run
  share the machine's mood, so they are not drawn as if independent);
- how many rounds met each half of the target, and how many met both;
- the whole machine's busy cores (its busy CPU per request times the requests a second).

A round is left out, and counted as such, when other work shared the cores during it or during its
floor: the whole machine's busy CPU per request (from /proc/stat) more than --max-other (a tenth by
default) above what the measured processes used (the server, PostgreSQL, Redis, the fake upstream
and wrk). Such a round measures the other work as much as the gateway (request_cpu.py logs both
figures for the same reason).

Runs are told apart by file; a target is matched by its label across files, so runs of the same
sources pool together. The intervals say how far more runs like these could move the medians; they
say nothing about a machine that runs faster or slower than it did in the runs given.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from request_cpu import TARGET_CPU_RATIO, TARGET_RPS_RATIO  # noqa: E402


@dataclass(frozen=True)
class PairedRound:
    run: str
    backend: str
    target: str
    cpu_ratio: float
    rps_ratio: float
    cores_busy: float


def other_work(row: dict) -> float:
    """How much more of the machine was busy than the measured processes used, as a share of what they used."""
    cpu = row["cpu_ms"]
    measured = row["machine_ms"] + cpu.get("upstream", 0.0) + cpu.get("wrk", 0.0)
    return cpu.get("machine busy", measured) / measured - 1 if measured else 0.0


def paired_rounds(run: str, rows: list[dict], *, max_other: float) -> tuple[list[PairedRound], Counter]:
    """Every gateway round of one run beside the floor of its backend and round number, and how many
    rounds of each (backend, target) were left out for other work on the machine."""
    floors = {(row["backend"], row["round"]): row for row in rows if row["target"] == "floor"}
    paired, left_out = [], Counter()
    for row in rows:
        floor = floors.get((row["backend"], row["round"]))
        if row["target"] == "floor" or floor is None:
            continue
        if max(other_work(row), other_work(floor)) > max_other:
            left_out[(row["backend"], row["target"])] += 1
            continue
        paired.append(PairedRound(run=run, backend=row["backend"], target=row["target"],
                                  cpu_ratio=row["machine_ms"] / floor["machine_ms"],
                                  rps_ratio=row["rps"] / floor["rps"],
                                  cores_busy=row["cpu_ms"].get("machine busy", 0.0) * row["rps"] / 1000))
    return paired, left_out


def bootstrap_interval(by_run: dict[str, list[float]], *, resamples: int, rng: random.Random,
                       level: float = 0.90) -> tuple[float, float]:
    """A ``level`` interval of the pooled median: runs drawn with replacement, then rounds within each."""
    runs = list(by_run.values())
    medians = []
    for _ in range(resamples):
        pooled = []
        for values in rng.choices(runs, k=len(runs)):
            pooled.extend(rng.choices(values, k=len(values)))
        medians.append(statistics.median(pooled))
    medians.sort()
    tail = (1 - level) / 2
    return medians[int(tail * (resamples - 1))], medians[int((1 - tail) * (resamples - 1))]


def pool(paired: list[PairedRound], *, resamples: int, seed: int, left_out: Counter) -> list[dict]:
    """Per (backend, target): the pooled medians, their intervals and the rounds at target."""
    groups: dict[tuple[str, str], list[PairedRound]] = {}
    for entry in paired:
        groups.setdefault((entry.backend, entry.target), []).append(entry)
    summary = []
    for (backend, target), rounds in groups.items():
        rng = random.Random(seed)  # the same draws for every group: intervals comparable side by side
        cpu_by_run: dict[str, list[float]] = {}
        rps_by_run: dict[str, list[float]] = {}
        for entry in rounds:
            cpu_by_run.setdefault(entry.run, []).append(entry.cpu_ratio)
            rps_by_run.setdefault(entry.run, []).append(entry.rps_ratio)
        cpu_ok = [entry.cpu_ratio <= TARGET_CPU_RATIO for entry in rounds]
        rps_ok = [entry.rps_ratio >= TARGET_RPS_RATIO for entry in rounds]
        summary.append({
            "backend": backend, "target": target, "runs": len(cpu_by_run), "rounds": len(rounds),
            "left_out": left_out[(backend, target)],
            "cpu_ratio": statistics.median(entry.cpu_ratio for entry in rounds),
            "cpu_interval": bootstrap_interval(cpu_by_run, resamples=resamples, rng=rng),
            "rps_ratio": statistics.median(entry.rps_ratio for entry in rounds),
            "rps_interval": bootstrap_interval(rps_by_run, resamples=resamples, rng=rng),
            "at_target": (sum(cpu_ok), sum(rps_ok), sum(a and b for a, b in zip(cpu_ok, rps_ok))),
            "cores_busy": statistics.median(entry.cores_busy for entry in rounds),
            "run_medians": [(statistics.median(cpu_by_run[run]), statistics.median(rps_by_run[run]))
                            for run in cpu_by_run],
        })
    return summary


def table(summary: list[dict]) -> str:
    lines = ["| backend | served | runs | rounds | × floor CPU (90 % interval) | of floor req/s (90 % interval) "
             "| rounds at target (CPU; req/s; both) | left out | cores busy | each run's medians |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for entry in summary:
        cpu_low, cpu_high = entry["cpu_interval"]
        rps_low, rps_high = entry["rps_interval"]
        runs = ", ".join(f"{cpu:.2f}× / {rps:.2f}" for cpu, rps in entry["run_medians"])
        lines.append(f"| {entry['backend']} | {entry['target']} | {entry['runs']} | {entry['rounds']} "
                     f"| {entry['cpu_ratio']:.2f} ({cpu_low:.2f}–{cpu_high:.2f}) "
                     f"| {entry['rps_ratio']:.2f} ({rps_low:.2f}–{rps_high:.2f}) "
                     f"| {'; '.join(str(n) for n in entry['at_target'])} of {entry['rounds']} | {entry['left_out']} "
                     f"| {entry['cores_busy']:.2f} | {runs} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="JSON files written by request_cpu.py --out")
    parser.add_argument("--resamples", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=27)
    parser.add_argument("--max-other", type=float, default=0.10,
                        help="leave out a round whose machine was this much busier than the measured processes")
    args = parser.parse_args()
    paired, left_out = [], Counter()
    for path in args.runs:
        rows = json.loads(path.read_text())["runs"]
        kept, dropped = paired_rounds(str(path), rows, max_other=args.max_other)
        paired.extend(kept)
        left_out.update(dropped)
    if not paired:
        raise SystemExit(f"no gateway round beside a floor in the files given ({sum(left_out.values())} left out "
                         f"for other work on the machine)")
    print(f"pool_rounds.py: {len(args.runs)} run(s), target ≤ {TARGET_CPU_RATIO}× the floor's CPU and "
          f"≥ {TARGET_RPS_RATIO} of its req/s; rounds with other work above {args.max_other:.0%} left out")
    print()
    print(table(pool(paired, resamples=args.resamples, seed=args.seed, left_out=left_out)))
    kept = {(entry.backend, entry.target) for entry in paired}
    for (backend, target), count in sorted(left_out.items()):
        if (backend, target) not in kept:
            print(f"\n{backend} {target}: all {count} round(s) left out for other work on the machine")


if __name__ == "__main__":
    main()
