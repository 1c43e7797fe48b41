"""The table and plot of `make bench`, from the JSON files scripts/bench.sh wrote.

    python bench/report.py bench/results

Prints the figures beside the targets (met or not) and writes bench/results/table.md and
bench/results/plot.png (throughput per second, and the fire delay of every evaluation of the
paced and batched runs).
"""

import json
import pathlib
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(out, name):
    return json.loads((out / f"{name}.json").read_text())


def quantiles(q):
    """p50 / p99 / max of a delay distribution, in whole milliseconds."""
    return f"{q['p50']:.0f} / {q['p99']:.0f} / {q['max']:.0f} ms"


def main(out):
    batched, single = load(out, "batched"), load(out, "single")
    sloan, naive = load(out, "sloan"), load(out, "naive-sloan")
    memory, bullmq, env = load(out, "memory-figures"), load(out, "bullmq"), load(out, "environment")
    paced, bullmq_paced = load(out, "paced"), load(out, "bullmq-paced")
    p = paced["drain"]
    bull_rate = bullmq["adds_per_second"]
    d = batched["drain"]
    rows = [
        (
            "ingest, batched (100 events/request), durable in Postgres",
            f"{batched['events_per_second']:,.0f} events/s",
            f"{bull_rate:,.0f} adds/s",
            f"{batched['events_per_second'] / bull_rate:.2f} x",
            ">= 4 x BullMQ",
            batched["events_per_second"] >= 4 * bull_rate,
        ),
        (
            "ingest, one event per request, 128 connections",
            f"{single['events_per_second']:,.0f} events/s",
            f"{bull_rate:,.0f} adds/s",
            f"{single['events_per_second'] / bull_rate:.2f} x",
            ">= 1.5 x BullMQ",
            single["events_per_second"] >= 1.5 * bull_rate,
        ),
        (
            "evaluations per entity per burst",
            f"{d['evaluations_per_entity']:.2f} (single-event run: "
            f"{single['drain']['evaluations_per_entity']:.2f})",
            f"{bullmq['jobs_per_entity']:.2f} jobs",
            "",
            "exactly 1.00",
            d["evaluations"] == d["entities"]
            and single["drain"]["evaluations"] == single["drain"]["entities"],
        ),
        (
            f"fire delay, {p['entities']:,} entities due within 5 s (p50 / p99 / max)",
            quantiles(p["fire_delay_ms"]),
            quantiles(bullmq_paced["fire_lag_ms"]),
            "",
            "p99 <= 50 ms",
            p["fire_delay_ms"]["p99"] <= 50 and p["evaluations"] == p["entities"],
        ),
        (
            f"(for information) fire delay after the batched burst: {d['entities']:,} entities "
            "due within about half a second",
            quantiles(d["fire_delay_ms"]),
            quantiles(bullmq["fire_lag_ms"]),
            "",
            "",
            None,
        ),
        (
            "evaluations per second (default rules), busiest one-second window",
            f"{d['evaluations_per_second_peak']:,} /s (mean {d['evaluations_per_second_mean']:,.0f})",
            "",
            "",
            ">= 5,000/s",
            d["evaluations_per_second_peak"] >= 5000,
        ),
        (
            "Redis memory per pending entity",
            f"{memory['redis_bytes'] / max(memory['pending'], 1):.0f} bytes "
            f"({memory['pending']:,} pending)",
            "",
            "",
            "<= 200 bytes",
            memory["redis_bytes"] / max(memory["pending"], 1) <= 200,
        ),
        (
            "service RSS at 100k pending entities",
            f"{memory['rss_kb'] / 1024:.0f} MB",
            "",
            "",
            "<= 150 MB",
            memory["rss_kb"] / 1024 <= 150,
        ),
        (
            "Sloan scenario (20 posts: 10 early flags, 500 upvotes)",
            f"{sloan['drain']['actions']} actions, {sloan['drain']['wrong_actions']} wrong",
            f"naive: {naive['drain']['wrong_actions']} wrong, "
            f"{naive['drain']['evaluations_per_event']:.2f} evaluations/event",
            "",
            "quiesce: none; naive: wrong",
            sloan["drain"]["actions"] == 0 and naive["drain"]["wrong_actions"] > 0,
        ),
    ]
    lines = [
        f"Machine: {env['machine']}; Redis {env['redis']}, PostgreSQL {env['postgres']}, "
        f"Node.js {env['node']} ({bullmq['peer']}), {env['rustc']}",
        "",
        "| figure | quiesce | BullMQ / baseline | ratio | target | met |",
        "|---|---|---|---|---|---|",
    ]
    for figure, ours, theirs, ratio, target, met in rows:
        verdict = "" if met is None else ("met" if met else "NOT met")
        lines.append(f"| {figure} | {ours} | {theirs} | {ratio} | {target} | {verdict} |")
    lines += [
        "",
        f"Duplicate actions: batched {d['duplicate_actions']}, single {single['drain']['duplicate_actions']}; "
        f"wrong actions: batched {d['wrong_actions']}, single {single['drain']['wrong_actions']}. "
        f"HTTP latency batched p50/p99 {batched['http_latency_ms']['p50']:.1f}/"
        f"{batched['http_latency_ms']['p99']:.1f} ms, single {single['http_latency_ms']['p50']:.1f}/"
        f"{single['http_latency_ms']['p99']:.1f} ms. Errors: batched {batched['errors_by_status'] or 'none'}, "
        f"single {single['errors_by_status'] or 'none'}.",
    ]
    table = "\n".join(lines)
    print(table)
    (out / "table.md").write_text(table + "\n")

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7))
    for run, label in ((batched, "batched (100/request)"), (single, "one event/request")):
        top.plot(range(len(run["accepted_per_second"])), run["accepted_per_second"], marker="o", label=label)
    top.axhline(bull_rate, color="grey", linestyle="--", label=f"BullMQ adds/s ({bull_rate:,.0f})")
    top.set_ylabel("events accepted per second")
    top.set_xlabel("seconds into the run")
    top.legend()
    for run, label in ((paced, "due over 5 s (paced run)"), (batched, "due together (batched run)")):
        delays = run["drain"]["fire_delays"]
        bottom.scatter([t for t, _ in delays], [ms for _, ms in delays], s=2, label=f"quiesce, {label}")
    for peer, label in ((bullmq_paced, "paced"), (bullmq, "batched")):
        bottom.axhline(peer["fire_lag_ms"]["p99"], linestyle="--", color="grey",
                       label=f"BullMQ p99, {label} ({peer['fire_lag_ms']['p99']} ms)")
    bottom.set_yscale("symlog", linthresh=10)
    bottom.set_ylabel("fire delay (ms)")
    bottom.set_xlabel("seconds into the run")
    bottom.legend()
    fig.tight_layout()
    fig.savefig(out / "plot.png", dpi=100)


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "bench/results"))
