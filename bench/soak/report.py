"""The report of `make soak` (bench/soak/run.sh): memory in the second half, the paced run's
request latency and errors, and what Postgres backends waited on (from waits.tsv, samples of
pg_stat_activity every 250 ms during the paced run)."""

import json
import os
import sys
from collections import defaultdict


def main(directory):
    env = json.load(open(os.path.join(directory, "environment.json")))
    run = json.load(open(os.path.join(directory, "soak.json")))
    print(f"## make soak ({env['machine']}; load average at the start / at the end: {env['load']})")
    print()
    if env["sustained"] is not None:
        probe = json.load(open(os.path.join(directory, "soak-probe.json")))
        lat = probe["http_latency_ms"]
        print(
            f"Closed-loop probe: {probe['events_accepted']:,} events at {probe['events_per_second']:,.0f} "
            f"events/s, {env['sustained']:,} events/s in its second half "
            f"(request latency p50 / p99 / max {lat['p50']:.1f} / {lat['p99']:.1f} / {lat['max']:.1f} ms). "
            f"Paced run at {env['share']} of it: {env['rate']:,} events/s for {env['seconds']} s."
        )
    else:
        print(f"Paced run at SOAK_RATE {env['rate']:,} events/s for {env['seconds']} s.")
    print()
    lat = run["http_latency_ms"]
    errors = run["errors_by_status"]
    print("| events accepted | events/s | requests | latency p50 / p99 / max ms | errors |")
    print("|---|---|---|---|---|")
    print(
        f"| {run['events_accepted']:,} | {run['events_per_second']:,.0f} | {run['requests']:,} "
        f"| {lat['p50']:.1f} / {lat['p99']:.1f} / {lat['max']:.1f} "
        f"| {', '.join(f'{k}: {v}' for k, v in errors.items()) or 'none'} |"
    )
    print()
    rss = [line.split() for line in open(os.path.join(directory, "rss.txt"))][1:]
    rss = [(int(t), int(s), int(w)) for t, s, w in (r for r in rss if len(r) == 3)]
    if rss:
        half = env["seconds"] // 2 // 10 * 10
        first = next((r for r in rss if r[0] == half), rss[0])
        last = rss[-1]
        print(
            f"RSS in the second half ({first[0]} s to {last[0]} s): serve {first[1]:,} -> {last[1]:,} kB, "
            f"worker {first[2]:,} -> {last[2]:,} kB."
        )
        print()
    waits(directory)


def waits(directory):
    """Samples of waiting backends, by statement and what it waited on: how many samples, the
    longest the statement had run when sampled, and the statements that blocked it."""
    path = os.path.join(directory, "waits.tsv")
    groups = defaultdict(lambda: {"samples": 0, "max_ms": 0.0, "blockers": defaultdict(int)})
    samples = 0
    for line in open(path) if os.path.exists(path) else []:
        parts = line.rstrip("\n").split("\t")
        if len(parts) != 7:
            continue
        _, _, kind, event, ms, query, blockers = parts
        samples += 1
        g = groups[(query[:40], f"{kind}:{event}")]
        g["samples"] += 1
        g["max_ms"] = max(g["max_ms"], float(ms or 0))
        for blocker in filter(None, blockers.split(" | ")):
            g["blockers"][blocker.split(":", 1)[1][:40] if ":" in blocker else blocker] += 1
    print(f"Postgres waits during the paced run ({samples:,} samples of waiting backends, every 250 ms):")
    print()
    if not groups:
        print("none sampled.")
        return
    print("| statement | waited on | samples | longest running when sampled, ms | blocked by (samples) |")
    print("|---|---|---|---|---|")
    ranked = sorted(groups.items(), key=lambda kv: -kv[1]["samples"])
    for (query, event), g in ranked[:15]:
        blockers = "; ".join(
            f"`{b}` ({c})" for b, c in sorted(g["blockers"].items(), key=lambda kv: -kv[1])[:3]
        )
        print(f"| `{query}` | {event} | {g['samples']} | {g['max_ms']:,.0f} | {blockers or '-'} |")


if __name__ == "__main__":
    main(sys.argv[1])
