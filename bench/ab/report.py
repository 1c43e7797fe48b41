"""The table of `make bench-ab` (bench/ab/run.sh): events/s of the candidate and the baseline
per round and run, the candidate's ratio to the baseline in the same round, and the BullMQ
peer's single-event rate in the same round when it ran.

    python3 bench/ab/report.py bench/results-ab
"""

import json
import pathlib
import statistics
import sys


def rate(path):
    if not path.exists():
        return None
    report = json.loads(path.read_text())
    return report.get("events_per_second")


def peer_rate(path):
    if not path.exists():
        return None
    report = json.loads(path.read_text())
    return report.get("adds_per_second")


def main(out):
    out = pathlib.Path(out)
    env = json.loads((out / "environment.json").read_text())
    print(f"baseline {env['baseline']}, candidate {env['candidate']}; {env['events']:,} events over "
          f"{env['entities']:,} entities a run, 2 s window (evaluations beside ingest); load {env['load']}")
    print()
    print("| round | run | candidate events/s | baseline events/s | candidate / baseline | BullMQ peer events/s | candidate / peer |")
    print("|---|---|---|---|---|---|---|")
    ratios = {"batched": [], "single": []}
    for r in range(1, env["rounds"] + 1):
        peer = peer_rate(out / f"peer-{r}.json")
        for run in ("batched", "single"):
            c = rate(out / f"candidate-{r}-{run}.json")
            b = rate(out / f"baseline-{r}-{run}.json")
            ratio = c / b if c and b else None
            if ratio:
                ratios[run].append(ratio)
            p = peer if run == "single" else None
            print(f"| {r} | {run} | {c or 0:,.0f} | {b or 0:,.0f} | "
                  f"{f'{ratio:.2f}' if ratio else '-'} | {f'{p:,.0f}' if p else '-'} | "
                  f"{f'{c / p:.2f}' if p and c else '-'} |")
    print()
    for run, values in ratios.items():
        if values:
            print(f"- {run}: candidate / baseline median {statistics.median(values):.2f} "
                  f"(rounds: {', '.join(f'{v:.2f}' for v in values)})")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench/results-ab")
