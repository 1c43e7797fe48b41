#!/usr/bin/env python3
"""Tables of `make bench-cluster` and `make idle-cost` (bench/cluster/run.sh,
bench/idle-cost/run.sh), from what they wrote: INFO ALL of every node before and after each run
(info/<label>-<host:port>.txt), the load generator's JSON, the prefix's keys per primary
(info/<label>-keys.txt) and the server's /metrics around the burst. Standard library only.

  report.py burst DIR     the burst and the pending run, on the cluster and on one node, and
                          issue 39's shape (random entities, 1 serve + 3 workers) on the cluster
  report.py idle DIR      idle worker processes: commands per second per process

Commands are INFO commandstats calls (what total_commands_processed counts too): Redis 7 counts
each command a Lua script runs, as well as the EVALSHA that ran it. INFO (the snapshots' own)
and REPLCONF (a replica's acknowledgements to its master) are left out.
"""

import glob
import json
import os
import re
import sys
from collections import Counter, defaultdict

LEFT_OUT = {"info", "replconf"}


def read_info(path):
    """(header fields, {field: value}, Counter of calls per command) of one INFO ALL file."""
    head, fields, calls = {}, {}, Counter()
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("# bench:"):
                head = dict(kv.split("=", 1) for kv in line[len("# bench:"):].split())
                continue
            if not line or line.startswith("#") or ":" not in line:
                continue
            key, value = line.split(":", 1)
            if key.startswith("cmdstat_"):
                n = re.search(r"calls=(\d+)", value)
                calls[key[len("cmdstat_"):]] = int(n.group(1)) if n else 0
            else:
                fields[key] = value
    return head, fields, calls


def nodes_of(directory, label):
    """host:port of every node snapshotted under a label."""
    prefix = os.path.join(directory, "info", f"{label}-")
    return sorted(
        p[len(prefix):-len(".txt")]
        for p in glob.glob(prefix + "*.txt")
        if not p.endswith("-keys.txt")
    )


def delta(directory, before, after, node):
    """What one node did between two snapshots: seconds, role, commands by name, CPU s, memory."""
    h0, f0, c0 = read_info(os.path.join(directory, "info", f"{before}-{node}.txt"))
    h1, f1, c1 = read_info(os.path.join(directory, "info", f"{after}-{node}.txt"))
    calls = Counter({k: c1[k] - c0.get(k, 0) for k in c1 if c1[k] - c0.get(k, 0) > 0})
    for k in LEFT_OUT:
        calls.pop(k, None)
    cpu = lambda f: float(f.get("used_cpu_sys", 0)) + float(f.get("used_cpu_user", 0))
    return {
        "seconds": float(h1["at"]) - float(h0["at"]),
        "role": h1.get("role", "master"),
        "calls": calls,
        "commands": sum(calls.values()),
        "cpu": cpu(f1) - cpu(f0),
        "memory": int(f1.get("used_memory", 0)) - int(f0.get("used_memory", 0)),
    }


def keys_of(directory, label):
    """{host:port: (keys, MEMORY USAGE bytes, due members)} of the prefix on each primary."""
    out = {}
    path = os.path.join(directory, "info", f"{label}-keys.txt")
    if os.path.exists(path):
        for line in open(path):
            node, keys, size, due = line.split()
            out[node] = (int(keys), int(size), int(due))
    return out


def slots_of(directory):
    """{host:port: slots} of the masters, from CLUSTER NODES."""
    slots = {}
    path = os.path.join(directory, "cluster-nodes.txt")
    if not os.path.exists(path):
        return slots
    for line in open(path):
        parts = line.split()
        if len(parts) < 8 or "master" not in parts[2]:
            continue
        count = 0
        for r in parts[8:]:
            if r.startswith("["):
                continue
            a, _, b = r.partition("-")
            count += int(b or a) - int(a) + 1
        slots[parts[1].split("@")[0]] = count
    return slots


def script_calls(directory, label):
    """Calls of each Lua script (quiesce_redis_script_duration_seconds_count) and group commits
    (quiesce_ingest_commit_seconds_count) between the /metrics scrapes around a run."""

    def read(path):
        counts = Counter()
        if not os.path.exists(path):
            return counts
        for line in open(path):
            m = re.match(r'quiesce_redis_script_duration_seconds_count\{.*script="([^"]+)".*\} (\S+)', line)
            if m:
                counts[m.group(1)] += float(m.group(2))
            m = re.match(r"quiesce_ingest_commit_seconds_count(?:\{.*\})? (\S+)", line)
            if m:
                counts["(group commits)"] += float(m.group(1))
            m = re.match(r"quiesce_evaluations_total(?:\{.*\})? (\S+)", line)
            if m:
                counts["(evaluations)"] += float(m.group(1))
        return counts

    before = read(os.path.join(directory, f"{label}-before.prom"))
    after = read(os.path.join(directory, f"{label}-after.prom"))
    return Counter({k: after[k] - before.get(k, 0) for k in after if after[k] - before.get(k, 0) > 0})


def ratio(values):
    values = [v for v in values if v is not None]
    if len(values) < 2 or min(values) <= 0:
        return "-"
    return f"{max(values) / min(values):.2f}"


def n(x, digits=0):
    return f"{x:,.{digits}f}"


def holds_index(directory, label, node):
    """Whether a master held the shard index's keys after a run (its key listing)."""
    listing = os.path.join(directory, "info", f"{label}-keys-{node}.list")
    return os.path.exists(listing) and any("}:shards:" in k for k in open(listing))


def burst(directory):
    env = json.load(open(os.path.join(directory, "environment.json")))
    slots = slots_of(directory)
    if os.path.exists(os.path.join(directory, "burst-cluster-before.prom")) or os.path.exists(
        os.path.join(directory, "burst-node-before.prom")
    ):
        burst_runs(directory, env, slots)
    if os.path.exists(os.path.join(directory, "random-cluster-before.prom")):
        random_run(directory, env, slots)


def burst_runs(directory, env, slots):
    print(f"## bench-cluster ({env['machine']}, Redis {env['redis']}, PostgreSQL {env['postgres']})")
    print()
    if "load" in env:
        print(f"Load average (1, 5, 15 min) at the start / at the end: {env['load']}.")
        print()
    print(
        f"Batched burst: {n(env['events'])} events over {n(env['entities'])} entities, 100 a request, "
        f"64 connections, one `quiesce serve`, a 2 s window, {env['shards']} shards. Commands: INFO "
        "commandstats calls, those run inside Lua scripts included (Redis 7 counts them, as it does "
        "in total_commands_processed), INFO and REPLCONF left out, between snapshots just before and "
        "after the load generator's run (ingest, drain and its check's 2 + 1 s idle pause); "
        "commands/s over that window. Keys: the run's prefix on each master after the run (what "
        "stays: the applied-action cache keys, 24 h, and the shard index). Small requests: the same "
        "events, 20 a request from 4 senders, on the same server after the burst."
    )
    print()
    print("| redis | master | slots | keys after | commands | commands/s | EVALSHA/s | CPU s |")
    print("|---|---|---|---|---|---|---|---|")
    summary = []
    kinds = {"burst": "", "small": ", small requests", "paced": ", paced: 10,000 entities over 5 s"}
    runs = [(target, kind) for target in ("cluster", "node") for kind in kinds]
    for target, kind in runs:
        label = f"{kind}-{target}"
        if not os.path.exists(os.path.join(directory, f"{label}-before.prom")):
            continue
        name = f"{target}{kinds[kind]}"
        nodes = nodes_of(directory, f"{label}-before")
        deltas = {node: delta(directory, f"{label}-before", f"{label}-after", node) for node in nodes}
        masters = [node for node in nodes if deltas[node]["role"] == "master"]
        keys = keys_of(directory, f"burst-{target}")
        for node in masters:
            d = deltas[node]
            index = holds_index(directory, f"burst-{target}", node)
            shown = f"{node} (shard index)" if index and len(masters) > 1 else node
            print(
                f"| {name} | {shown} | {n(slots[node]) if node in slots else '-'} "
                f"| {n(keys.get(node, (0, 0, 0))[0])} | {n(d['commands'])} "
                f"| {n(d['commands'] / d['seconds'])} | {n(d['calls']['evalsha'] / d['seconds'])} "
                f"| {d['cpu']:.2f} |"
            )
        replicas = [node for node in nodes if deltas[node]["role"] != "master"]
        for node in replicas:
            d = deltas[node]
            print(
                f"| {name} (replica) | {node} | - | - | {n(d['commands'])} "
                f"| {n(d['commands'] / d['seconds'])} | - | {d['cpu']:.2f} |"
            )
        run = json.load(open(os.path.join(directory, f"{label}.json")))
        summary.append((name, run, [deltas[m] for m in masters], script_calls(directory, label)))
    print()
    print(
        "| redis | events/s | evaluations per entity | fire delay p50 / p99 / max ms "
        "| duplicate / wrong actions | drained | commands/s, all masters | max/min commands/s "
        "| max/min EVALSHA/s | max/min CPU |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for target, run, masters, _ in summary:
        d = run["drain"]
        fire = d["fire_delay_ms"]
        seconds = masters[0]["seconds"]
        print(
            f"| {target} | {n(run['events_per_second'])} | {d['evaluations_per_entity']:.2f} "
            f"| {fire['p50']:.0f} / {fire['p99']:.0f} / {fire['max']:.0f} "
            f"| {d['duplicate_actions']} / {d['wrong_actions']} | {str(d['drained']).lower()} "
            f"| {n(sum(m['commands'] for m in masters) / seconds)} "
            f"| {ratio([m['commands'] for m in masters])} "
            f"| {ratio([m['calls']['evalsha'] for m in masters])} "
            f"| {ratio([m['cpu'] for m in masters])} |"
        )
    print()
    print(
        "Fire delay: evaluation start (the worker's clock) minus the due time it was claimed at "
        "(Redis' clock), per evaluation, from the `evaluations` table. After the batched burst it is "
        "mostly queueing (10,000 entities fall due within about the send time, more than the "
        "evaluations a second this machine does); the paced run (one event for each of 10,000 "
        "entities over 5 s, `make bench`'s fire-delay run) is the scheduler's own delay."
    )
    print()
    print("Per event on the hot path (the burst; script calls from /metrics, commands from INFO):")
    print()
    print("| redis | " + " | ".join(["group commits", "schedule", "index_report", "index_read", "index_settle",
                                     "claim", "ack", "unlock", "renew", "commands / event", "EVALSHA / event",
                                     "commands / evaluation"]) + " |")
    print("|---|" + "---|" * 12)
    for target, run, masters, scripts in summary:
        events = run["events_accepted"] or 1
        evaluations = run["drain"]["evaluations"] or 1
        commands = sum(m["commands"] for m in masters)
        evalsha = sum(m["calls"]["evalsha"] for m in masters)
        cells = [n(scripts.get(k, 0)) for k in ("(group commits)", "schedule", "index_report", "index_read",
                                                 "index_settle", "claim", "ack", "unlock", "renew")]
        print(f"| {target} | " + " | ".join(cells) +
              f" | {commands / events:.2f} | {evalsha / events:.3f} | {commands / evaluations:.1f} |")
    print()
    print("Commands by name over the burst (all masters):")
    print()
    for target, _, masters, _ in summary:
        total = Counter()
        for m in masters:
            total.update(m["calls"])
        print(f"- {target}: " + ", ".join(f"{k} {n(v)}" for k, v in total.most_common()))
    print()
    print(
        f"Pending entities: {n(env['pending'])} entities with one event each and a 10 min window "
        "(ids of 17 characters); bytes: MEMORY USAGE (samples 0) of every key of the run's prefix "
        "after the send, and used_memory after minus before."
    )
    print()
    print("| redis | master | due-set keys (shards) | keys | pending entities | MEMORY USAGE bytes | bytes per pending entity | used_memory delta |")
    print("|---|---|---|---|---|---|---|---|")
    for target in ("cluster", "node"):
        label = f"pending-{target}"
        keys = keys_of(directory, label)
        nodes = nodes_of(directory, f"{label}-before")
        due_keys = {}
        for node in keys:
            listing = os.path.join(directory, "info", f"{label}-keys-{node}.list")
            due_keys[node] = (
                sum(1 for k in open(listing) if k.strip().endswith(":due") and ":shards:" not in k)
                if os.path.exists(listing)
                else 0
            )
        total = [0, 0, 0, 0]
        for node in nodes:
            d = delta(directory, f"{label}-before", f"{label}-after", node)
            if d["role"] != "master":
                continue
            k, size, due = keys.get(node, (0, 0, 0))
            total = [total[0] + due_keys.get(node, 0), total[1] + k, total[2] + due, total[3] + size]
            memory = d["memory"]
            print(
                f"| {target} | {node} | {due_keys.get(node, 0)} | {n(k)} | {n(due)} | {n(size)} "
                f"| {size / due if due else 0:.0f} | {n(memory)} |"
            )
        if total[2]:
            print(
                f"| {target} | all | {total[0]} | {n(total[1])} | {n(total[2])} | {n(total[3])} "
                f"| {total[3] / total[2]:.0f} | |"
            )


RANDOM_SCRIPTS = ("(group commits)", "schedule", "index_report", "index_read", "index_settle", "claim",
                  "ack", "reap", "renew", "retry", "(evaluations)")


def random_run(directory, env, slots):
    label = "random-cluster"
    seconds_asked = env.get("random_seconds", 4)
    print()
    print("### Issue 39's shape: random entities, 1 `serve` + 3 `worker` processes")
    print()
    if env.get("random_load"):
        print(f"Load average (1, 5, 15 min) at the start of this run: {env['random_load']}.")
        print()
    print(
        "One `quiesce serve` and three `quiesce worker` processes on the cluster, a 2 s window, "
        f"{env['shards']} shards; 4 senders, each posting requests of 20 events from entities drawn "
        "at random among 1,000 (1-4 events each, mixed signals) and pausing 0-20 ms after each "
        "(`quiesce-loadgen --scenario random --entities 1000 --batch 20 --connections 4 --pause 20ms`). "
        f"Commands: INFO commandstats of every node over {seconds_asked} s, from "
        f"{env.get('random_warmup', 3)} s into the send (entities fall due 2 s after their last "
        "event, so by then evaluations run as the events come)."
    )
    print()
    nodes = nodes_of(directory, f"{label}-before")
    deltas = {node: delta(directory, f"{label}-before", f"{label}-after", node) for node in nodes}
    masters = [node for node in nodes if deltas[node]["role"] == "master"]
    print("| master | slots | commands | commands/s | EVALSHA/s | CPU s | by command (calls) |")
    print("|---|---|---|---|---|---|---|")
    for node in masters:
        d = deltas[node]
        shown = f"{node} (shard index)" if holds_index(directory, label, node) else node
        print(
            f"| {shown} | {n(slots[node]) if node in slots else '-'} | {n(d['commands'])} "
            f"| {n(d['commands'] / d['seconds'])} | {n(d['calls']['evalsha'] / d['seconds'])} "
            f"| {d['cpu']:.2f} | {', '.join(f'{k} {n(v)}' for k, v in d['calls'].most_common())} |"
        )
    run = json.load(open(os.path.join(directory, f"{label}.json")))
    d = run["drain"]
    fire = d["fire_delay_ms"]
    ms = [deltas[m] for m in masters]
    print()
    print(
        "| events/s (whole send) | evaluations per entity | fire delay p50 / p99 / max ms "
        "| duplicate / wrong actions | drained | commands/s, all masters | max/min commands "
        "| max/min EVALSHA | max/min CPU |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    print(
        f"| {n(run['events_per_second'])} | {d['evaluations_per_entity']:.2f} "
        f"| {fire['p50']:.0f} / {fire['p99']:.0f} / {fire['max']:.0f} "
        f"| {d['duplicate_actions']} / {d['wrong_actions']} | {str(d['drained']).lower()} "
        f"| {n(sum(m['commands'] for m in ms) / ms[0]['seconds'])} "
        f"| **{ratio([m['commands'] for m in ms])}** | {ratio([m['calls']['evalsha'] for m in ms])} "
        f"| {ratio([m['cpu'] for m in ms])} |"
    )
    scripts = script_calls(directory, label)
    print()
    print(
        "Script calls of the four processes between /metrics scrapes just around the count "
        "(quiesce_redis_script_duration_seconds_count), with group commits and evaluations:"
    )
    print()
    print("| " + " | ".join(RANDOM_SCRIPTS) + " |")
    print("|" + "---|" * len(RANDOM_SCRIPTS))
    print("| " + " | ".join(n(scripts.get(k, 0)) for k in RANDOM_SCRIPTS) + " |")


def idle(directory):
    env = json.load(open(os.path.join(directory, "environment.json")))
    print(f"## idle-cost ({env['machine']}, Redis {env['redis']})")
    print()
    if "load" in env:
        print(f"Load average (1, 5, 15 min) at the start / at the end: {env['load']}.")
        print()
    print(
        f"{env['workers']} `quiesce worker` processes, {env['shards']} shards, nothing due, "
        f"{env['seconds']} s measured after {env['warmup']} s of warm-up. Commands: INFO commandstats "
        "calls on every node, those run inside Lua scripts included, INFO (the snapshots' own) and "
        "REPLCONF (replicas' acknowledgements) left out."
    )
    print()
    print("| redis | node | role | commands | commands/s | by command (calls) |")
    print("|---|---|---|---|---|---|")
    rows = []
    for target in ("node", "cluster"):
        label = f"idle-{target}"
        nodes = nodes_of(directory, f"{label}-before")
        if not nodes:
            continue
        masters_total, seconds, by_name = 0, None, Counter()
        for node in nodes:
            d = delta(directory, f"{label}-before", f"{label}-after", node)
            seconds = d["seconds"]
            print(
                f"| {target} | {node} | {d['role']} | {n(d['commands'])} | {d['commands'] / d['seconds']:.1f} "
                f"| {', '.join(f'{k} {v}' for k, v in d['calls'].most_common())} |"
            )
            if d["role"] == "master":
                masters_total += d["commands"]
                by_name.update(d["calls"])
        rows.append((target, masters_total, seconds, by_name))
    print()
    print("| redis | commands/s, all primaries | per worker process | top-level (EVALSHA and plain commands) per process | inside scripts per process |")
    print("|---|---|---|---|---|")
    inner = {"time", "zrangebyscore", "hmget", "zscore", "zadd", "hincrby", "zrem", "publish"}
    for target, total, seconds, by_name in rows:
        per = total / seconds / env["workers"]
        inside = sum(v for k, v in by_name.items() if k in inner) / seconds / env["workers"]
        print(f"| {target} | {total / seconds:.1f} | {per:.1f} | {per - inside:.1f} | {inside:.1f} |")
    print()
    print(
        "Inside scripts: TIME, ZRANGEBYSCORE, HMGET, ZSCORE, ZADD, HINCRBY, ZREM, PUBLISH (with nothing "
        "due only index_read's TIME and two ZRANGEBYSCORE run); top-level: EVALSHA, SET (the rescan "
        "step's lock), INCRBY (its position), ZRANGE (the rescan's shard heads and the sweep's dead "
        "sets)."
    )


if __name__ == "__main__":
    {"burst": burst, "idle": idle}[sys.argv[1]](sys.argv[2])
