#!/usr/bin/env python3
"""The itemised cost table of an evaluation (`make bench-costs`, bench/costs/run.sh): reads
bench/results-costs/ (or the directory given) and prints, per build, its evaluations/s and
what taking its part out gained against quiesce as it is (and which share of the gap to the
evaluation floor that explains), the CPU seconds of each process over the run and Postgres'
time in statements; then each build's top statements (when pg_stat_statements was loaded).
Standard library only."""

import json
import os
import sys

PARTS = {
    "as-is": "nothing: quiesce as it is",
    "evaluation-floor": "all but the claim, lock and ack (one statement a batch)",
    "no-rules": "the rules' run (CEL): an empty verdict",
    "no-fence": "the version fence of the completion",
    "no-action": "the decision applied: action, outbox row, statement of reasons",
    "no-snapshot-row": "the snapshot stored with the evaluation ('{}')",
    "no-recount": "the completion's recount of unfolded events",
    "no-fold": "the fold",
    "no-author": "the author's derived event",
    "no-trace": "the trace context read of the snapshot",
}


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def fmt(x, digits=0, unit=""):
    if x is None:
        return "-"
    return f"{x:,.{digits}f}{unit}"


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "bench/results-costs"
    meta = load(os.path.join(out, "costs.json"))
    if meta is None:
        sys.exit(f"bench-costs: no {out}/costs.json (was bench/costs/run.sh run?)")
    rounds, variants = meta["rounds"], meta["variants"]

    runs = {}
    for name in variants:
        found = []
        for r in range(1, rounds + 1):
            base = os.path.join(out, f"cost-{name}-{r}")
            report = load(base + ".json")
            if report is None:
                continue
            found.append({
                "report": report,
                "cpu": load(base + ".cpu.json") or {},
                "statements": load(base + ".statements.json"),
            })
        runs[name] = found

    def rate(name):
        return mean([(r["report"].get("drain") or {}).get("evaluations_per_second_mean") for r in runs[name]])

    as_is, floor = rate("as-is"), rate("evaluation-floor")
    gap = floor - as_is if as_is is not None and floor is not None else None

    print(f"{meta['entities']:,}-entity burst (2 events each, rules: {meta['rules']}), "
          f"{rounds} round(s) in alternating order; CPU seconds from just before the load "
          "generator starts to the end of its drain, mean over the rounds.\n")
    print("| build | taken out | evaluations/s, mean (each round) | x as-is | x floor "
          "| gain vs as-is, evaluations/s | share of the as-is-to-floor gap "
          "| Postgres CPU s | quiesce CPU s | Redis CPU s | load generator CPU s "
          "| Postgres CPU µs / evaluation | Postgres statement time s | machine busy | evaluations per entity |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in variants:
        found = runs[name]
        if not found:
            print(f"| {name} | {PARTS.get(name, '')} | no run | | | | | | | | | | | | |")
            continue
        drains = [r["report"].get("drain") or {} for r in found]
        rates = [d.get("evaluations_per_second_mean") for d in drains]
        r = mean(rates)
        cpu = lambda key: mean([x["cpu"].get(key) for x in found])
        pg_cpu = cpu("postgres_cpu_seconds")
        evaluations = mean([d.get("evaluations") for d in drains])
        per_eval = pg_cpu / evaluations * 1e6 if pg_cpu is not None and evaluations else None
        stmt = mean([x["statements"]["total_exec_time_ms"] / 1000 for x in found if x["statements"]])
        busy = cpu("machine_busy_share")
        gain = r - as_is if r is not None and as_is is not None else None
        share = gain / gap * 100 if gain is not None and gap else None
        each = ", ".join(fmt(x) for x in rates)
        print(f"| {name} | {PARTS.get(name, '')} | {fmt(r)} ({each}) "
              f"| {fmt(r / as_is if r and as_is else None, 2, ' x')} "
              f"| {fmt(r / floor if r and floor else None, 2, ' x')} "
              f"| {'' if name == 'as-is' else fmt(gain, 0)} "
              f"| {'' if name in ('as-is', 'evaluation-floor') else fmt(share, 0, '%')} "
              f"| {fmt(pg_cpu, 1)} | {fmt(cpu('quiesce_cpu_seconds'), 1)} "
              f"| {fmt(cpu('redis_cpu_seconds'), 1)} | {fmt(cpu('loadgen_cpu_seconds'), 1)} "
              f"| {fmt(per_eval, 0)} | {fmt(stmt, 1)} "
              f"| {fmt(busy * 100 if busy is not None else None, 0, '%')} "
              f"| {fmt(mean([d.get('evaluations_per_entity') for d in drains]), 2)} |")

    if not meta.get("statements"):
        print("\nNo time per statement: pg_stat_statements was not loaded by the Postgres server.")
        return
    for name in variants:
        merged = {}
        measured = [x["statements"] for x in runs[name] if x["statements"]]
        for stats in measured:
            for s in stats["statements"]:
                m = merged.setdefault(s["query"], {"calls": 0, "ms": 0.0, "rows": 0, "blks": 0})
                m["calls"] += s["calls"]
                m["ms"] += s["total_exec_time_ms"]
                m["rows"] += s["rows"]
                m["blks"] += s["shared_blks"]
        if not merged:
            continue
        n = len(measured)
        print(f"\n### {name}: top statements (per run, mean over {n} run(s))\n")
        print("| total ms | calls | mean ms | rows | shared blocks (hit + read) | statement |")
        print("|---|---|---|---|---|---|")
        top = sorted(merged.items(), key=lambda kv: kv[1]["ms"], reverse=True)[:15]
        for query, m in top:
            text = query.replace("|", "\\|")
            print(f"| {m['ms'] / n:,.0f} | {m['calls'] / n:,.0f} | {m['ms'] / max(m['calls'], 1):,.2f} "
                  f"| {m['rows'] / n:,.0f} | {m['blks'] / n:,.0f} | `{text}` |")


if __name__ == "__main__":
    main()
