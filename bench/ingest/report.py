"""The table and plot of `make bench`, from the JSON files bench/ingest/run.sh wrote.

    python bench/ingest/report.py bench/results

Prints the figures beside the targets of issue 17 (met or not) with BullMQ, Graphile Worker and
the ceiling builds of the same run, then the Postgres WAL per accepted event of every ingest run,
and writes bench/results/table.md and bench/results/plot.png (throughput per second, and the fire
delay of every evaluation of the paced and batched runs).
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


def best(out, variant, run, rounds):
    """The ingest-only run of a build with the best rate over the rounds (the rounds alternate
    in order; the machine is shared), refused if it answered errors."""
    reports = [load(out, f"ingest-{variant}-{r}-{run}") for r in range(1, rounds + 1)]
    for report in reports:
        if report["errors_by_status"]:
            sys.exit(f"report: {variant} {run} answered errors: {report['errors_by_status']}")
    return max(reports, key=lambda r: r["events_per_second"]), reports


def main(out):
    batched, single, hot = load(out, "batched"), load(out, "single"), load(out, "hot")
    sloan, naive = load(out, "sloan"), load(out, "naive-sloan")
    memory, bullmq, env = load(out, "memory-figures"), load(out, "bullmq"), load(out, "environment")
    paced, bullmq_paced = load(out, "paced"), load(out, "bullmq-paced")
    g_batched, g_single = load(out, "graphile-batched"), load(out, "graphile-single")
    g_paced = load(out, "graphile-paced")
    ingest = load(out, "ingest-only")
    rounds, variants = ingest["rounds"], ingest["variants"]
    as_is_b, as_is_b_all = best(out, "as-is", "batched", rounds)
    as_is_s, _ = best(out, "as-is", "single", rounds)
    ceiling = {v: (best(out, v, "batched", rounds)[0], best(out, v, "single", rounds)[0])
               for v in variants if v != "as-is"}
    p, d, h = paced["drain"], batched["drain"], hot["drain"]
    bull_rate = bullmq["adds_per_second"]
    gb_rate, gs_rate = g_batched["adds_per_second"], g_single["adds_per_second"]
    rate = lambda r: f"{r['events_per_second']:,.0f} events/s"
    adds = lambda peer: f"{peer['adds_per_second']:,.0f} adds/s"
    lag = lambda peer: quantiles(peer["fire_lag_ms"])
    # Every figure must come with every event: a peer that lost events is marked.
    lost = lambda peer: "" if peer["events_lost"] == 0 else f" ({peer['events_lost']:,} events lost)"
    # A paced peer that could not keep its rate spread its due times over longer than asked.
    slow = lambda peer: ("" if peer["adds_per_second"] >= 0.9 * peer["rate"]
                         else f" (adds ran at {peer['adds_per_second']:,.0f}/s, not {peer['rate']:,}/s)")
    skipped = "not measured (BENCH_CEILINGS=0)"

    def share(ours, name, run):
        if name not in ceiling:
            return (skipped, "", "")
        theirs = ceiling[name][0 if run == "batched" else 1]
        return (f"{name}: {rate(theirs)}", f"{ours['events_per_second'] / theirs['events_per_second']:.0%}",
                ours["events_per_second"] / theirs["events_per_second"])

    drained = [("paced", p), ("batched", d), ("hot", h), ("single", single["drain"]), ("sloan", sloan["drain"])]
    duplicates = sum(run["duplicate_actions"] for _, run in drained)
    wrong = sum(run["wrong_actions"] for _, run in drained)
    eo_theirs, eo_ratio, eo = share(as_is_b, "events-only", "batched")
    ho_theirs, ho_ratio, ho = share(as_is_s, "http-only", "single")
    wal_batched = min(r["wal_bytes_per_event"] for r in as_is_b_all)
    hot_ratio = hot["events_per_second"] / batched["events_per_second"]
    # (figure, quiesce, BullMQ, Graphile Worker, ratio, target, met: True, False or None)
    rows = [
        (
            "batched ingest (100 events/request, 64 connections, ingest only), share of the events-only "
            "ceiling build of the same run",
            f"{rate(as_is_b)} (best of {rounds})",
            "", eo_theirs, eo_ratio, ">= 85%", None if eo == "" else eo >= 0.85,
        ),
        (
            "batched ingest (debounced run, evaluations running) vs Graphile Worker keeping every event "
            "(addJobs of 100)",
            rate(batched), adds(bullmq), adds(g_batched) + lost(g_batched),
            f"{batched['events_per_second'] / gb_rate:.2f} x", ">= 1.4 x",
            batched["events_per_second"] >= 1.4 * gb_rate,
        ),
        (
            "single-event ingest (128 connections) vs Graphile Worker single addJob",
            rate(single), "", f"{adds(g_single)} ({g_single['events']:,} in {g_single['add_seconds']:.0f} s)"
            + lost(g_single),
            f"{single['events_per_second'] / gs_rate:.2f} x", ">= 5 x",
            single["events_per_second"] >= 5 * gs_rate,
        ),
        (
            "single-event ingest (ingest only), share of the HTTP-only ceiling of the same run",
            f"{rate(as_is_s)} (best of {rounds})", "", ho_theirs, ho_ratio, ">= 45%",
            None if ho == "" else ho >= 0.45,
        ),
        (
            "WAL bytes per event, batched (ingest only; with evaluations: the debounced batched run)",
            f"{wal_batched:,.0f} (with evaluations: {batched['wal_bytes_per_event']:,.0f})", "",
            f"{g_batched['wal_bytes_per_event_adds']:,.0f} (with jobs: "
            f"{g_batched['wal_bytes_per_event_with_jobs']:,.0f})",
            "", "<= 600", wal_batched <= 600,
        ),
        (
            "hot-entity ingest (10 entities get 90% of the events) vs uniform, same run; evaluations per "
            "entity per burst",
            f"{rate(hot)} vs {rate(batched)}; {h['evaluations_per_entity']:.2f} hot, "
            f"{d['evaluations_per_entity']:.2f} uniform",
            "", "", f"{hot_ratio:.0%}", ">= 90%, evaluations per burst 1.00",
            hot_ratio >= 0.9 and h["evaluations"] == h["entities"] and d["evaluations"] == d["entities"],
        ),
        (
            f"fire delay after the batched burst ({d['entities']:,} entities due within about 0.5 s), "
            "p50 / p99 / max",
            quantiles(d["fire_delay_ms"]), lag(bullmq), lag(g_batched), "", "p99 <= 800 ms",
            d["fire_delay_ms"]["p99"] <= 800,
        ),
        (
            "evaluations per second (default rules), busiest one-second window",
            f"{d['evaluations_per_second_peak']:,} /s (mean {d['evaluations_per_second_mean']:,.0f})",
            "", "", "", ">= 12,000/s", d["evaluations_per_second_peak"] >= 12000,
        ),
        (
            "evaluations (jobs) per entity per burst: batched / single-event run",
            f"{d['evaluations_per_entity']:.2f} / {single['drain']['evaluations_per_entity']:.2f}",
            f"{bullmq['jobs_per_entity']:.2f} / -",
            f"{g_batched['jobs_per_entity']:.2f} / {g_single['jobs_per_entity']:.2f}",
            "", "exactly 1.00 (kept)",
            d["evaluations"] == d["entities"] and single["drain"]["evaluations"] == single["drain"]["entities"],
        ),
        (
            f"paced fire delay, {p['entities']:,} entities due within 5 s (p50 / p99 / max)",
            quantiles(p["fire_delay_ms"]), lag(bullmq_paced), lag(g_paced) + lost(g_paced) + slow(g_paced), "",
            "p99 <= 50 ms (kept)", p["fire_delay_ms"]["p99"] <= 50 and p["evaluations"] == p["entities"],
        ),
        (
            "Redis memory per pending entity",
            f"{memory['redis_bytes'] / max(memory['pending'], 1):.0f} bytes ({memory['pending']:,} pending)",
            "", "", "", "<= 200 bytes (kept)", memory["redis_bytes"] / max(memory["pending"], 1) <= 200,
        ),
        (
            "service RSS at 100k pending entities",
            f"{memory['rss_kb'] / 1024:.0f} MB", "", "", "", "<= 150 MB (kept)", memory["rss_kb"] / 1024 <= 150,
        ),
        (
            "Sloan scenario (20 posts: 10 early flags, 500 upvotes)",
            f"{sloan['drain']['actions']} actions, {sloan['drain']['wrong_actions']} wrong",
            f"naive: {naive['drain']['wrong_actions']} wrong, "
            f"{naive['drain']['evaluations_per_event']:.2f} evaluations/event",
            "", "", "quiesce: none; naive: wrong (kept)",
            sloan["drain"]["actions"] == 0 and naive["drain"]["wrong_actions"] > 0,
        ),
        (
            "duplicate or wrong actions, every drained run (" + ", ".join(n for n, _ in drained) + ")",
            f"{duplicates} duplicate, {wrong} wrong", "", "", "", "0 (kept)", duplicates == 0 and wrong == 0,
        ),
        (
            "(earlier target) batched ingest vs BullMQ adds",
            rate(batched), adds(bullmq), "", f"{batched['events_per_second'] / bull_rate:.2f} x", ">= 4 x BullMQ",
            batched["events_per_second"] >= 4 * bull_rate,
        ),
        (
            "(earlier target) single-event ingest vs BullMQ adds",
            rate(single), adds(bullmq), "", f"{single['events_per_second'] / bull_rate:.2f} x",
            ">= 1.5 x BullMQ", single["events_per_second"] >= 1.5 * bull_rate,
        ),
    ]
    lines = [
        f"Machine: {env['machine']}, load average {env['load_average'][0]} at the start, "
        f"{env['load_average'][1]} at the end; Redis {env['redis']}, PostgreSQL {env['postgres']}, "
        f"Node.js {env['node']} ({bullmq['peer']}, {g_batched['peer']}), {env['rustc']}",
        "",
        "| figure | quiesce | BullMQ / baseline | Graphile Worker / ceiling | ratio | target | met |",
        "|---|---|---|---|---|---|---|",
    ]
    for figure, ours, bull, graphile, ratio, target, met in rows:
        verdict = "" if met is None else ("met" if met else "NOT met")
        lines.append(f"| {figure} | {ours} | {bull} | {graphile} | {ratio} | {target} | {verdict} |")
    lines += [
        "",
        f"HTTP latency batched p50/p99 {batched['http_latency_ms']['p50']:.1f}/"
        f"{batched['http_latency_ms']['p99']:.1f} ms, hot {hot['http_latency_ms']['p50']:.1f}/"
        f"{hot['http_latency_ms']['p99']:.1f} ms, single {single['http_latency_ms']['p50']:.1f}/"
        f"{single['http_latency_ms']['p99']:.1f} ms. Errors: batched {batched['errors_by_status'] or 'none'}, "
        f"hot {hot['errors_by_status'] or 'none'}, single {single['errors_by_status'] or 'none'}. "
        f"Graphile Worker ({json.dumps(g_batched['settings'])}): {g_batched['events_delivered']:,} of "
        f"{g_batched['events']:,} batched events delivered to jobs, {g_single['events_delivered']:,} of "
        f"{g_single['events']:,} single.",
        "",
        "Postgres WAL per accepted event of every ingest run (the whole server's WAL from the first request "
        "to the end of the run's report: a debounced run's drain and evaluations included; other users of "
        "the server add to it):",
        "",
        "| run | events accepted | events/s | WAL bytes | WAL bytes/event |",
        "|---|---|---|---|---|",
    ]
    runs = ["paced", "batched", "hot", "single", "sloan", "naive-sloan", "memory"]
    runs += [f"ingest-{v}-{r}-{run}" for r in range(1, rounds + 1) for v in variants for run in ("batched", "single")]
    for name in runs:
        r = load(out, name)
        lines.append(f"| {name} | {r['events_accepted']:,} | {r['events_per_second']:,.0f} | "
                     f"{r['wal_bytes']:,} | {r['wal_bytes_per_event']:,.0f} |")
    if (out / "batched-retried.json").exists():
        lines += retries_table(out, batched, single)
    if (out / "batched-attributes.json").exists():
        lines += attributes_table(out, batched, single)
    if (out / "quiesce-big.json").exists():
        lines += evaluations_table(out, batched)
    table = "\n".join(lines)
    print(table)
    (out / "table.md").write_text(table + "\n")

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7))
    for run, label in ((batched, "batched (100/request)"), (hot, "hot entities (100/request)"),
                       (single, "one event/request")):
        top.plot(range(len(run["accepted_per_second"])), run["accepted_per_second"], marker="o", label=label)
    top.axhline(bull_rate, color="grey", linestyle="--", label=f"BullMQ adds/s ({bull_rate:,.0f})")
    top.axhline(gb_rate, color="grey", linestyle=":", label=f"Graphile Worker addJobs/s ({gb_rate:,.0f})")
    top.set_ylabel("events accepted per second")
    top.set_xlabel("seconds into the run")
    top.legend()
    for run, label in ((paced, "due over 5 s (paced run)"), (batched, "due together (batched run)")):
        delays = run["drain"]["fire_delays"]
        bottom.scatter([t for t, _ in delays], [ms for _, ms in delays], s=2, label=f"quiesce, {label}")
    for peer, label, style in ((bullmq_paced, "BullMQ p99, paced", "--"), (bullmq, "BullMQ p99, batched", "--"),
                               (g_paced, "Graphile Worker p99, paced", ":"),
                               (g_batched, "Graphile Worker p99, batched", ":")):
        bottom.axhline(peer["fire_lag_ms"]["p99"], linestyle=style, color="grey",
                       label=f"{label} ({peer['fire_lag_ms']['p99']} ms)")
    bottom.set_yscale("symlog", linthresh=10)
    bottom.set_ylabel("fire delay (ms)")
    bottom.set_xlabel("seconds into the run")
    bottom.legend()
    fig.tight_layout()
    fig.savefig(out / "plot.png", dpi=100)


def retries_table(out, batched, single):
    """The batched and single runs with half the requests re-sent (a sender's retries) beside the
    same runs on unique ids, in this run: the rate the sender sees, events answered per second."""
    rows = []
    for name, unique in (("batched", batched), ("single", single)):
        retried = load(out, f"{name}-retried")
        if retried["errors_by_status"]:
            sys.exit(f"report: {name}-retried answered errors: {retried['errors_by_status']}")
        share = retried["duplicates"] / max(retried["duplicates"] + retried["events_accepted"], 1)
        ratio = retried["answered_per_second"] / unique["events_per_second"]
        d = retried["drain"]
        rows.append(
            f"| {name} | {unique['events_per_second']:,.0f} | {retried['answered_per_second']:,.0f} "
            f"({retried['events_accepted']:,} new + {retried['duplicates']:,} duplicates, {share:.0%}) | "
            f"{ratio:.0%} | >= 80% | {'met' if ratio >= 0.8 else 'NOT met'} | "
            f"{retried['http_latency_ms']['p50']:.1f} / {retried['http_latency_ms']['p99']:.1f} ms | "
            f"{d['evaluations_per_entity']:.2f}, {d['duplicate_actions']} duplicate, {d['wrong_actions']} wrong |"
        )
    return [
        "",
        "Senders that retry: half the requests re-send an earlier one whole (`--duplicates 0.5`), beside the "
        "same run on unique ids (events answered per second, new and duplicates):",
        "",
        "| run | unique ids, events/s | retried, events answered/s | ratio | target | met | HTTP p50 / p99 "
        "(retried) | evaluations per entity, actions |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
    ]


def attributes_table(out, batched, single):
    """The runs with attributes on every event beside the same runs without, in this run."""
    b_attr, s_attr = load(out, "batched-attributes"), load(out, "single-attributes")
    ratio = lambda a, b: f"{a / b:.0%}"
    evals = lambda run: run["drain"]["evaluations_per_second_mean"]
    rows = [
        ("batched ingest, events/s", f"{batched['events_per_second']:,.0f}",
         f"{b_attr['events_per_second']:,.0f}", ratio(b_attr["events_per_second"], batched["events_per_second"]),
         ">= 90%", b_attr["events_per_second"] >= 0.9 * batched["events_per_second"]),
        ("single-event ingest, events/s", f"{single['events_per_second']:,.0f}",
         f"{s_attr['events_per_second']:,.0f}", ratio(s_attr["events_per_second"], single["events_per_second"]),
         "", None),
        ("evaluations/s (mean) of the batched burst", f"{evals(batched):,.0f}", f"{evals(b_attr):,.0f}",
         ratio(evals(b_attr), evals(batched)), ">= 85%", evals(b_attr) >= 0.85 * evals(batched)),
        ("WAL bytes per event, batched (evaluations included)", f"{batched['wal_bytes_per_event']:,.0f}",
         f"{b_attr['wal_bytes_per_event']:,.0f}", ratio(b_attr["wal_bytes_per_event"], batched["wal_bytes_per_event"]),
         "", None),
        ("duplicate / wrong actions, batched", f"{batched['drain']['duplicate_actions']} / {batched['drain']['wrong_actions']}",
         f"{b_attr['drain']['duplicate_actions']} / {b_attr['drain']['wrong_actions']}", "", "0 / 0",
         b_attr["drain"]["duplicate_actions"] == 0 and b_attr["drain"]["wrong_actions"] == 0),
    ]
    lines = ["", "Attributes on every event (a reason and a score; rules that read them), beside the same runs "
             "without, in this run:", "",
             "| figure | without | with attributes | with / without | target | met |", "|---|---|---|---|---|---|"]
    for figure, without, with_, r, target, met in rows:
        mark = "" if met is None else ("yes" if met else "**no**")
        lines.append(f"| {figure} | {without} | {with_} | {r} | {target} | {mark} |")
    return lines


def evaluations_table(out, batched):
    """Evaluations at this machine's limit: quiesce and the evaluation floor build on the 10,000- and
    50,000-entity bursts, and the peers whose jobs do the same work on the larger one."""
    big, floor_big, floor_small = load(out, "quiesce-big"), load(out, "floor-big"), load(out, "floor-batched")
    peers = [load(out, "peers-work-bullmq"), load(out, "peers-work-graphile")]
    seconds = lambda ms: f"{ms / 1000:.2f} s"

    def ours(name, run, note=""):
        d = run["drain"]
        return (name, f"{d['entities']:,}", f"{d['evaluations_per_second_mean']:,.0f}",
                f"{d['evaluations_per_second_peak']:,}",
                f"{seconds(d['fire_delay_ms']['p50'])} / {seconds(d['fire_delay_ms']['p99'])}",
                f"{d['evaluations_per_entity']:.2f}", note, d["evaluations_per_second_mean"])

    def peer(run):
        s = run["settings"]
        settings = (f"concurrency {s['concurrency']}, pool {s['pool']}" if run["peer"].startswith("bullmq")
                    else f"concurrency {s['concurrentJobs']}, pool {s['maxPoolSize']}, "
                         f"local queue {s['localQueue']['size']}")
        d = run["fire_delay_at_start_ms"]
        return (f"{run['peer']} doing the same work ({settings})", f"{run['entities']:,}",
                f"{run['evaluations_per_second_mean']:,.0f}", f"{run['evaluations_per_second_peak']:,}",
                f"{seconds(d['p50'])} / {seconds(d['p99'])}", f"{run['jobs_per_entity']:.2f}",
                f"{run['duplicate_actions']} duplicate, {run['wrong_actions']} wrong actions",
                run["evaluations_per_second_mean"])

    mean = big["drain"]["evaluations_per_second_mean"]
    rows = [ours("quiesce, default rules", batched),
            ours("evaluation floor build", floor_small, "no rules, no fence, no action"),
            ours("quiesce, default rules", big),
            ours("evaluation floor build", floor_big, "no rules, no fence, no action")]
    rows += [peer(run) for run in peers]
    lines = ["", "Evaluations at this machine's limit: the batched burst and a burst of "
             f"{big['drain']['entities']:,} entities (2 events each), quiesce beside the evaluation floor "
             "build and the peers whose jobs do the same work (fire delay from the evaluation's or job's "
             "start, as quiesce records it), in this run:", "",
             "| run | entities | evaluations/s, mean | busiest second | fire delay p50 / p99 | per entity "
             "| note | quiesce (same burst) / it |", "|---|---|---|---|---|---|---|---|"]
    for i, (name, entities, m, peak, delay, per, note, value) in enumerate(rows):
        base = batched["drain"]["evaluations_per_second_mean"] if i < 2 else mean
        ratio = "" if i in (0, 2) else f"{base / max(value, 1e-9):.2f} x"
        lines.append(f"| {name} | {entities} | {m} | {peak} | {delay} | {per} | {note} | {ratio} |")
    return lines


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "bench/results"))
