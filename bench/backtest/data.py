#!/usr/bin/env python3
"""A week of evaluations for make backtest-bench, written as CSV for psql's \\copy.

usage: bench/backtest/data.py ENTITIES OUT_DIR

Each entity (a post) is evaluated 1 to 8 times over the last 7 days (2.5 on average), its
flags, upvotes and reports growing between evaluations; 70% are benign, 20% contested, 10%
abusive. Each evaluation is decided as quiesce's default rules decide (the strongest match,
applied only if it raises the status and stays within an override), so the rules in force
replayed over the data take exactly the actions it holds (the bench checks that). A tenth of
the hides are reversed by a moderator half an hour later (with the override a reversal implies).
Writes entities.csv, evaluations.csv, actions.csv and decisions.csv into OUT_DIR; stdlib only,
seeded, so the same arguments give the same data.
"""

import csv
import datetime as dt
import json
import os
import random
import sys

ORDER = {"visible": 0, "flagged": 1, "hidden": 2, "suspended": 3}


def rules(flags, weight, upvotes, reports):
    """The default rules' matches, in file order: (rule, action, reason)."""
    share = flags / (flags + upvotes) if flags + upvotes else 0.0
    pile = f"{flags} flags against {upvotes} upvotes"
    matched = []
    if weight >= 8.3 and share >= 0.25:
        matched.append(("hide_flag_pile_on", "hide", pile))
    if reports >= 5:
        matched.append(("remove_reported", "hide", f"{reports} reports"))
    if (flags >= 3 and share >= 0.25) or reports >= 3:
        matched.append(("review_repeated_flags", "flag", pile))
    return matched


def strongest(matched):
    """The strongest action; the first rule in file order among equals."""
    best = None
    for m in matched:
        if best is None or ORDER[status_of(m[1])] > ORDER[status_of(best[1])]:
            best = m
    return best


def status_of(action):
    return {"flag": "flagged", "hide": "hidden", "suspend": "suspended"}[action]


def iso(t):
    return t.isoformat()


def main():
    entities, out = int(sys.argv[1]), sys.argv[2]
    random.seed(18)
    now = dt.datetime.now(dt.timezone.utc)
    start = now - dt.timedelta(days=7) + dt.timedelta(minutes=20)
    span = (now - dt.timedelta(hours=10) - start).total_seconds()
    files = {
        name: open(os.path.join(out, f"{name}.csv"), "w", newline="")
        for name in ["entities", "evaluations", "actions", "decisions"]
    }
    w = {name: csv.writer(f) for name, f in files.items()}
    action_id = 0
    for i in range(entities):
        entity = f"post:bench-{i}"
        kind = random.random()
        profile = "benign" if kind < 0.7 else "contested" if kind < 0.9 else "abusive"
        trust = random.uniform(1.0, 2.0)
        steps = min(8, 1 + int(random.expovariate(1 / 1.5)))
        t = start + dt.timedelta(seconds=random.uniform(0, span))
        flags = upvotes = reports = 0
        status, version, cap, cap_until = "visible", 0, None, None
        evaluations = 0
        for step in range(steps):
            if profile == "benign":
                upvotes += random.randint(0, 30)
                flags += 1 if random.random() < 0.2 else 0
            elif profile == "contested":
                flags += random.randint(0, 5)
                upvotes += random.randint(0, 10)
            else:
                flags += random.randint(2, 8)
                reports += random.randint(0, 3)
            weight = round(flags * trust, 3)
            started = t
            finished = t + dt.timedelta(milliseconds=random.randint(2, 40))
            in_force = cap if cap is not None and cap_until > started else None
            signals = {}
            for name, count, wt in [("flag", flags, weight), ("upvote", upvotes, float(upvotes)),
                                    ("report", reports, float(reports))]:
                if count:
                    signals[name] = {"count": count, "weight": wt}
            snapshot = {
                "entity": entity, "kind": "post", "status": status, "moderation_version": version,
                "event_count": flags + upvotes + reports, "signals": signals,
                "taken_at": iso(started), "override_cap": in_force, "author": None,
            }
            matched = rules(flags, weight, upvotes, reports)
            decision = strongest(matched)
            applies = (
                decision is not None
                and ORDER[status_of(decision[1])] > ORDER[status
                ] and (in_force is None or ORDER[status_of(decision[1])] <= ORDER[in_force])
            )
            verdict = {
                "matched": [{"rule": r, "action": a, "reason": why} for r, a, why in matched],
                "shadow": [], "errors": [],
            }
            applied = None
            if applies:
                action_id += 1
                applied = action_id
                rule, action, reason = decision
                reversed_at = None
                next_t = t + dt.timedelta(minutes=random.randint(5, 240))
                if action == "hide" and random.random() < 0.1:
                    reversed_at = finished + min(dt.timedelta(minutes=30), (next_t - finished) / 2)
                w["actions"].writerow([
                    action_id, entity, action, rule, reason, status, status_of(action),
                    json.dumps(snapshot), version, f"bench-{action_id}", iso(finished),
                    iso(reversed_at) if reversed_at else "", "mod:bench" if reversed_at else "",
                    "not abuse" if reversed_at else "",
                ])
                previous = status
                status, version = status_of(action), version + 1
                if reversed_at:
                    status, version = previous, version + 1
                    cap, cap_until = previous, reversed_at + dt.timedelta(days=7)
                    w["decisions"].writerow([
                        entity, "reversal", action_id, "mod:bench", "not abuse", previous,
                        iso(cap_until), iso(reversed_at),
                    ])
            else:
                next_t = t + dt.timedelta(minutes=random.randint(5, 240))
            w["evaluations"].writerow([
                entity, "bench", iso(started), iso(finished), snapshot["moderation_version"],
                snapshot["event_count"], json.dumps(verdict), applied if applied else "",
                json.dumps(snapshot), iso(started),
            ])
            evaluations += 1
            t = next_t
            if t >= now - dt.timedelta(minutes=5):
                break
        w["entities"].writerow([
            entity, "post", status, version, flags + upvotes + reports,
            flags + upvotes + reports, evaluations, iso(t),
            cap or "", iso(cap_until) if cap else "", "mod:bench" if cap else "",
            "not abuse" if cap else "",
        ])
    for f in files.values():
        f.close()


if __name__ == "__main__":
    main()
