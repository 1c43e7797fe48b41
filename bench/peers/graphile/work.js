// The Graphile Worker peer doing quiesce's work: the debounce of bench.js (a job per entity
// under a job key, run_at moved to now + the window by every add), with each job doing what a
// platform would write to get quiesce's decision (../decide.mjs): read the entity's counts per
// type from Postgres, run the default rules, record the decision, take a version-checked
// action, on Graphile Worker's own pool (helpers.withPgClient, as its task docs show). The adds
// are the platform's ingest: a batch's events are inserted into Postgres before their jobs are
// added. bench.js stays the scheduler-only reference. Prints one JSON line.
//
//   node work.js --database-url postgres://postgres@127.0.0.1:5432/postgres \
//                --database graphile_work_<id> --events 100000 --entities 50000 \
//                [--mode batched|single] [--batch 100] [--window-ms 2000] [--in-flight 16] \
//                [--seed 1] [--rate 2000] [--max-drain-seconds 300]
//
// Event i goes to entity post:<i % entities> with the type quiesce's load generator gives event
// i of `--scenario burst` with the same seed (../plan.mjs). --database is created on the server
// of --database-url and dropped at the end. Modes as in bench.js: batched is one insert and one
// addJobs per --batch events (the events of one entity in a batch merged into one job spec),
// single is one insert and one addJob per event. The worker runs in this process with the
// configuration of Graphile Worker's performance page (--concurrency, --max-pool-size,
// --local-queue-size, --complete-job-batch-delay, --fail-job-batch-delay, --poll-interval
// change it); where each setting comes from: ../SETTINGS.md.
import { readFileSync } from 'fs';
import pg from 'pg';
import { Logger, makeWorkerUtils, run } from 'graphile-worker';
import { options, scratchDatabase, sendBatches } from '../common.mjs';
import { addDebounced, workerSettings } from './settings.mjs';

import { Jobs, SCHEMA, evaluate, ingest, outcome } from '../decide.mjs';
import { burstSignals } from '../plan.mjs';

const args = options();
const serverUrl = new URL(args['database-url'] ?? 'postgres://postgres@127.0.0.1:5432/postgres');
const database = args.database ?? `graphile_work_${process.pid}`;
const mode = args.mode ?? 'batched';
if (mode !== 'batched' && mode !== 'single') throw new Error(`--mode: batched or single, not ${mode}`);
const events = Number(args.events ?? 100000);
const entities = Number(args.entities ?? 50000);
const windowMs = Number(args['window-ms'] ?? 2000);
// Adds in flight, each on a connection of its own (as in bench.js).
const inFlight = Number(args['in-flight'] ?? 16);
const batch = mode === 'batched' ? Number(args.batch ?? 100) : 1;
const rate = Number(args.rate ?? 0);
const seed = Number(args.seed ?? 1);
const maxDrainSeconds = Number(args['max-drain-seconds'] ?? 300);

const worker = workerSettings(args);

const scratch = scratchDatabase(pg, serverUrl, database);
const { admin, url: databaseUrl } = scratch;

// Quiet: Graphile Worker logs every job at info.
const quiet = new Logger(() => (level, message) => {
  if (level === 'error' || level === 'warning') console.error(`graphile: ${message}`);
});

await scratch.run('graphile work', bench);

async function bench() {
  const utils = await makeWorkerUtils({
    connectionString: databaseUrl.toString(), maxPoolSize: inFlight, logger: quiet,
  });
  let runner;
  try {
    return await measure(utils, (r) => (runner = r));
  } finally {
    // On failure too: no client of the database is left behind.
    await runner?.stop();
    await utils.release();
  }
}

async function measure(utils, onRunner) {
  await utils.migrate();
  await utils.withPgClient((client) => client.query(SCHEMA));
  const signals = burstSignals(events, seed);

  const tally = new Jobs(windowMs);
  const runner = await run({
    preset: { worker: { connectionString: databaseUrl.toString(), ...worker } },
    noHandleSignals: true,
    logger: quiet,
    taskList: {
      evaluate: async (payload, helpers) => {
        const entity = payload[0].entity;
        await tally.run(entity, () => helpers.withPgClient((client) => evaluate(client, entity)));
      },
    },
  });
  onRunner(runner);

  const addSeconds = await sendBatches({ events, batch, inFlight, rate }, async (first, end) => {
    const rows = [];
    const perEntity = new Map();
    for (let i = first; i < end; i++) {
      const entity = `post:${i % entities}`;
      rows.push([String(i), entity, signals[i], `user:${i % 997}`]);
      if (!perEntity.has(entity)) perEntity.set(entity, []);
      perEntity.get(entity).push({ entity, event: i });
    }
    await utils.withPgClient((client) => ingest(client, rows));
    // run_at after the insert: the window starts when the job is added.
    const runAt = new Date(Date.now() + windowMs);
    const now = Date.now();
    for (const entity of perEntity.keys()) tally.added(entity, now);
    await addDebounced(utils, mode, perEntity, runAt);
  });

  await tally.drained(maxDrainSeconds);
  await runner.stop();
  onRunner(null);
  const checked = await utils.withPgClient((client) => outcome(client, signals, entities));
  const left = await utils.withPgClient((client) =>
    client.query('SELECT count(*)::int AS jobs FROM graphile_worker._private_jobs'));

  const version = JSON.parse(readFileSync(new URL('./node_modules/graphile-worker/package.json', import.meta.url))).version;
  return {
    peer: `graphile-worker ${version}`, mode: 'work', add_mode: mode, batch,
    settings: { ...worker, in_flight: inFlight },
    events, entities, window_ms: windowMs, seed, rate: rate || null,
    add_seconds: addSeconds, adds_per_second: events / addSeconds,
    ...tally.figures(entities), jobs_left: left.rows[0].jobs, ...checked,
  };
}
