"""The report of `make soak-ingest` (bench/soak/ingest.sh): events accepted per minute, the
second minute against the last, and the server's RSS.

    python3 bench/soak/ingest_report.py .local/soak-ingest
"""

import json
import pathlib
import sys


def main(out):
    out = pathlib.Path(out)
    env = json.loads((out / "environment.json").read_text())
    report = json.loads((out / "soak-ingest.json").read_text())
    per_second = report["accepted_per_second"]
    minutes = [per_second[i:i + 60] for i in range(0, len(per_second), 60)]
    # Only whole minutes: the last second of a run is cut short.
    rates = [sum(m) / 60 for m in minutes if len(m) == 60]
    print(f"{env['senders']} senders, {env['batch']} events a request over {env['entities']:,} random "
          f"entities, closed loop, 2 s window (evaluations beside ingest), {env['seconds']} s; "
          f"{report['events_accepted']:,} events accepted ({report['events_per_second']:,.0f}/s); "
          f"load {env['load']}")
    print()
    print("| minute | events/s |")
    print("|---|---|")
    for i, r in enumerate(rates, 1):
        print(f"| {i} | {r:,.0f} |")
    print()
    if len(rates) >= 3:
        second, last = rates[1], rates[-1]
        share = last / second if second else 0
        verdict = "met" if share >= 0.9 else "not met"
        print(f"- second minute {second:,.0f}/s, last minute {last:,.0f}/s: {share:.2f} of the second "
              f"(target >= 0.90: {verdict})")
    rss = [line.split() for line in (out / "rss.txt").read_text().splitlines()[1:]]
    rss = [(int(t), int(kb)) for t, kb in rss if kb.isdigit()]
    if rss:
        start = next((kb for t, kb in rss if t >= 60), rss[0][1])
        end = rss[-1][1]
        peak = max(kb for _, kb in rss)
        print(f"- server RSS: {start / 1024:,.0f} MiB at 60 s, {end / 1024:,.0f} MiB at the end, "
              f"peak {peak / 1024:,.0f} MiB ({end / start:.2f} x from 60 s)")
    errors = report.get("errors_by_status") or {}
    if errors:
        print(f"- errors by status: {errors}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".local/soak-ingest")
