// What a platform that debounces with a job queue writes per job to reach quiesce's decision,
// shared by the work peers (bullmq/work.js, graphile/work.js): the tables, the platform's
// ingest of an event, the job (read the entity's counts, run quiesce's default rules, record
// the decision, take a version-checked action), and the figures of a run.
//
// Nothing here imports a package: each peer passes its own pg client, so the same code runs on
// a pg Pool (BullMQ) and on Graphile Worker's pool (helpers.withPgClient).

// quiesce's event columns (the API's `type` is quiesce's `signal`), the entity's status with
// its version, the evaluation record with the counts it saw, and the actions behind a unique
// dedup key.
export const SCHEMA = `
CREATE TABLE events (
  id          text PRIMARY KEY,
  entity      text NOT NULL,
  type        text NOT NULL,
  actor       text,
  weight      float8 NOT NULL,
  occurred_at timestamptz,
  received_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX events_entity_idx ON events (entity);
CREATE TABLE entities (
  entity  text PRIMARY KEY,
  status  text NOT NULL DEFAULT 'visible',
  version bigint NOT NULL DEFAULT 0
);
CREATE TABLE decisions (
  id         bigserial PRIMARY KEY,
  entity     text NOT NULL,
  counts     jsonb NOT NULL,
  decision   text,
  rule       text,
  decided_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE actions (
  id         bigserial PRIMARY KEY,
  entity     text NOT NULL,
  rule       text NOT NULL,
  action     text NOT NULL,
  version    bigint NOT NULL,
  dedup_key  text NOT NULL UNIQUE,
  created_at timestamptz NOT NULL DEFAULT now()
);
`;

// The platform's ingest: the events (one multi-row insert) and their entities' rows, in one
// statement; entity rows in entity order, so concurrent requests lock them in one order. Each event is [id, entity, type, actor]; weight 1 as quiesce gives an event
// without one (the load generator sends none).
export async function ingest(client, events) {
  const values = [];
  const rows = events.map((event, i) => {
    values.push(...event);
    const at = i * 4;
    return `($${at + 1}, $${at + 2}, $${at + 3}, $${at + 4}, 1, now())`;
  });
  await client.query(
    `WITH new AS (
       INSERT INTO events (id, entity, type, actor, weight, occurred_at)
       VALUES ${rows.join(', ')}
       RETURNING entity)
     INSERT INTO entities (entity) SELECT DISTINCT entity FROM new ORDER BY entity ON CONFLICT DO NOTHING`,
    values,
  );
}

// quiesce's status order: automation only escalates.
const SEVERITY = { visible: 0, flagged: 1, hidden: 2, suspended: 3 };
const STATUS_OF = { flag: 'flagged', hide: 'hidden', suspend: 'suspended' };

// rules/default.toml's post rules in file order (suspend_repeat_offender is for users, and
// the bench sends posts only). weight() is the summed weight, share(a, b) = a / (a + b), 0
// when both are 0.
const RULES = [
  {
    name: 'hide_flag_pile_on', action: 'hide',
    when: (c) => c.weight('flag') >= 8.3 && c.share('flag', 'upvote') >= 0.25,
  },
  { name: 'remove_reported', action: 'hide', when: (c) => c.count('report') >= 5 },
  {
    name: 'review_repeated_flags', action: 'flag',
    when: (c) => (c.count('flag') >= 3 && c.share('flag', 'upvote') >= 0.25) || c.count('report') >= 3,
  },
];

// The strongest matching rule (the first in file order among equals), or null.
// `counts` maps a type to { n, w } (count, summed weight).
export function strongest(counts) {
  const figures = {
    count: (type) => counts[type]?.n ?? 0,
    weight: (type) => counts[type]?.w ?? 0,
    share(a, b) {
      const total = this.count(a) + this.count(b);
      return total === 0 ? 0 : this.count(a) / total;
    },
  };
  let best = null;
  for (const rule of RULES) {
    if (!rule.when(figures)) continue;
    if (!best || SEVERITY[STATUS_OF[rule.action]] > SEVERITY[STATUS_OF[best.action]]) best = rule;
  }
  return best;
}

// The status an entity should end with: the rules on its final counts, from visible.
export function expectedStatus(counts) {
  const rule = strongest(counts);
  return rule ? STATUS_OF[rule.action] : 'visible';
}

// One job's work for `entity` on `client`, one connection (its transaction must not be spread
// over a pool). Returns what it did:
// 'none' (no action due), 'applied', 'fenced' (the version moved: another job acted first)
// or 'duplicate' (the action's dedup key existed).
export async function evaluate(client, entity) {
  // The entity's status and version with its counts per type, in one round trip.
  const { rows } = await client.query(
    `SELECT s.status, s.version, c.type, c.n, c.w
       FROM entities s
       LEFT JOIN (SELECT type, count(*)::int AS n, sum(weight) AS w
                    FROM events WHERE entity = $1 GROUP BY type) c ON true
      WHERE s.entity = $1`,
    [entity],
  );
  if (rows.length === 0) throw new Error(`no entity row for ${entity}`);
  const { status, version } = rows[0];
  const counts = {};
  for (const row of rows) if (row.type !== null) counts[row.type] = { n: row.n, w: row.w };
  const rule = strongest(counts);
  const acts = rule && SEVERITY[STATUS_OF[rule.action]] > SEVERITY[status];
  const record = [entity, JSON.stringify(counts), rule?.action ?? null, rule?.name ?? null];
  if (!acts) {
    await client.query(
      'INSERT INTO decisions (entity, counts, decision, rule) VALUES ($1, $2, $3, $4)', record);
    return 'none';
  }
  // The decision, the status and the action together: a job that dies half way leaves none.
  await client.query('BEGIN');
  try {
    await client.query(
      'INSERT INTO decisions (entity, counts, decision, rule) VALUES ($1, $2, $3, $4)', record);
    const updated = await client.query(
      'UPDATE entities SET status = $1, version = version + 1 WHERE entity = $2 AND version = $3',
      [STATUS_OF[rule.action], entity, version],
    );
    let outcome = 'fenced';
    if (updated.rowCount === 1) {
      const inserted = await client.query(
        `INSERT INTO actions (entity, rule, action, version, dedup_key) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (dedup_key) DO NOTHING`,
        [entity, rule.name, rule.action, version, `${entity}\n${rule.name}\n${version}`],
      );
      outcome = inserted.rowCount === 1 ? 'applied' : 'duplicate';
    }
    await client.query('COMMIT');
    return outcome;
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {});
    throw error;
  }
}

// What the run's tables say: actions (and duplicates: more than one action row for an
// entity and action, as quiesce's load generator counts them) and wrong final statuses
// against the rules on each entity's planned counts.
export async function outcome(client, signals, entities) {
  const planned = new Map();
  signals.forEach((type, i) => {
    const entity = `post:${i % entities}`;
    if (!planned.has(entity)) planned.set(entity, {});
    const counts = planned.get(entity);
    counts[type] ??= { n: 0, w: 0 };
    counts[type].n += 1;
    counts[type].w += 1;
  });
  const actions = (await client.query(
    'SELECT count(*)::int AS n, coalesce(sum(n - 1), 0)::int AS duplicates FROM (SELECT count(*) AS n FROM actions GROUP BY entity, action) a',
  )).rows[0];
  const decisions = (await client.query('SELECT count(*)::int AS n FROM decisions')).rows[0].n;
  const statuses = new Map(
    (await client.query('SELECT entity, status FROM entities')).rows.map((r) => [r.entity, r.status]),
  );
  let wrong = 0;
  let expected = 0;
  for (const [entity, counts] of planned) {
    const status = expectedStatus(counts);
    if (status !== 'visible') expected += 1;
    if ((statuses.get(entity) ?? 'visible') !== status) wrong += 1;
  }
  const actionRows = (await client.query('SELECT count(*)::int AS n FROM actions')).rows[0].n;
  return {
    decisions, actions: actionRows, expected_actions: expected,
    duplicate_actions: actions.duplicates, wrong_actions: wrong,
  };
}

// The timing figures of the jobs: `done` holds each job's completion time (ms), `delays` its
// fire delay (completion minus the entity's last add plus the window) and `startDelays` the same
// from the job's start, as quiesce records an evaluation's delay.
export function timing(done, delays, startDelays) {
  const sorted = [...done].sort((a, b) => a - b);
  const span = sorted.length ? Math.max((sorted[sorted.length - 1] - sorted[0]) / 1000, 1) : 1;
  // The busiest one-second window over every start, as quiesce's load generator finds it.
  let start = 0;
  let busiest = 0;
  for (let end = 0; end < sorted.length; end++) {
    while (sorted[start] <= sorted[end] - 1000) start++;
    busiest = Math.max(busiest, end + 1 - start);
  }
  return {
    evaluations_per_second_mean: sorted.length / span,
    evaluations_per_second_peak: busiest,
    drain_span_seconds: sorted.length ? (sorted[sorted.length - 1] - sorted[0]) / 1000 : 0,
    fire_delay_ms: quantiles(delays),
    fire_delay_at_start_ms: quantiles(startDelays),
  };
}

function quantiles(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const pick = (q) => (sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] : null);
  return { p50: pick(0.5), p99: pick(0.99), max: sorted.length ? sorted[sorted.length - 1] : null };
}

// What a work peer records of its adds and jobs, and the figures it reports from them: both
// peers run their jobs through `run` and wait with `drained`.
export class Jobs {
  constructor(windowMs) {
    this.windowMs = windowMs;
    // When each entity's last event was added: its job is due at that time + the window.
    this.lastAdd = new Map();
    // When each entity's latest job started: a job that started after the last add saw it.
    this.lastStart = new Map();
    this.processed = new Map();
    this.done = [];
    this.delays = [];
    this.startDelays = [];
    this.outcomes = { none: 0, applied: 0, fenced: 0, duplicate: 0, failed: 0 };
    this.lastDone = 0;
  }

  added(entity, at = Date.now()) {
    this.lastAdd.set(entity, at);
  }

  // Runs one job of `entity` (`evaluate` answers its outcome) and records it; a failure is
  // counted and thrown on to the library. `addedAt` stands in for an entity with no add seen.
  async run(entity, evaluate, addedAt) {
    const begun = Date.now();
    // Due when the entity's latest add so far was made, plus the window.
    const due = (this.lastAdd.get(entity) ?? addedAt) + this.windowMs;
    this.lastStart.set(entity, begun);
    try {
      this.outcomes[await evaluate()] += 1;
    } catch (error) {
      this.outcomes.failed += 1;
      throw error;
    }
    const now = Date.now();
    this.processed.set(entity, (this.processed.get(entity) ?? 0) + 1);
    this.done.push(now);
    this.delays.push(now - due);
    this.startDelays.push(begun - due);
    this.lastDone = now;
  }

  notCovered() {
    return [...this.lastAdd].filter(([entity, at]) => (this.lastStart.get(entity) ?? 0) < at).length;
  }

  // Until every entity had a job start after its last add, then a window and a second more
  // with no job done (so that an extra job would be counted), or `maxSeconds`.
  async drained(maxSeconds) {
    const deadline = Date.now() + maxSeconds * 1000;
    while (Date.now() < deadline) {
      if (this.notCovered() === 0 && Date.now() - this.lastDone > this.windowMs + 1000) return;
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  figures(entities) {
    const jobs = [...this.processed.values()].reduce((a, b) => a + b, 0);
    return {
      jobs, entities_evaluated: this.processed.size, jobs_per_entity: jobs / entities,
      entities_evaluated_more_than_once: [...this.processed.values()].filter((n) => n > 1).length,
      entities_not_covered: this.notCovered(),
      ...timing(this.done, this.delays, this.startDelays),
      outcomes: this.outcomes,
    };
  }
}
