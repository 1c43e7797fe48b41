// The Graphile Worker peer of `make bench`: a durable debounce in Postgres, a job per entity
// under a job key (jobKeyMode "replace": every add moves the job's run_at to now + the window),
// on the workload quiesce runs. Every event is kept: payloads are arrays, which Graphile Worker
// merges when a job key is added again before its job is locked. Prints one JSON line.
//
//   node bench.js --database-url postgres://postgres@127.0.0.1:5432/postgres \
//                 --database graphile_bench_<id> --mode batched|single --events 100000 \
//                 --entities 10000 --window-ms 2000 [--in-flight 16] [--rate 2000] [--max-seconds 60]
//
// --database is created (on the server of --database-url) and dropped at the end, so the run
// shares no table with anything else. Modes: batched is addJobs of --batch events (default 100),
// the events of one entity in a batch merged into one job spec; single is one addJob per event.
// With --rate the adds are paced at that many events per second; with --max-seconds no add starts
// after that long. The worker runs in this process during the adds with the settings of Graphile
// Worker's performance page (below; --concurrency, --max-pool-size, --local-queue-size,
// --complete-job-batch-delay, --fail-job-batch-delay and --poll-interval change them).
import pg from 'pg';
import { Logger, makeWorkerUtils, run } from 'graphile-worker';
import { readFileSync } from 'fs';
import { options, scratchDatabase } from '../common.mjs';
import { addDebounced, workerSettings } from './settings.mjs';

const args = options();
const serverUrl = new URL(args['database-url'] ?? 'postgres://postgres@127.0.0.1:5432/postgres');
const database = args.database ?? `graphile_bench_${process.pid}`;
const mode = args.mode ?? 'batched';
if (mode !== 'batched' && mode !== 'single') throw new Error(`--mode: batched or single, not ${mode}`);
const events = Number(args.events ?? 100000);
const entities = Number(args.entities ?? 10000);
const windowMs = Number(args['window-ms'] ?? 2000);
// Adds in flight, each on a connection of its own: an add queued for a connection would carry
// a run_at computed before it was sent.
const inFlight = Number(args['in-flight'] ?? 16);
const batch = mode === 'batched' ? Number(args.batch ?? 100) : 1;
const rate = Number(args.rate ?? 0);
// With --max-seconds, no add starts after that many seconds (one add per event is slow).
const maxSeconds = Number(args['max-seconds'] ?? 0);

const worker = workerSettings(args);

const scratch = scratchDatabase(pg, serverUrl, database);
const { admin, url: databaseUrl } = scratch;
const walLsn = async () => (await admin('SELECT pg_current_wal_lsn()::text AS lsn')).rows[0].lsn;
const walDiff = async (from, to) =>
  Number((await admin(`SELECT pg_wal_lsn_diff('${to}', '${from}') AS d`)).rows[0].d);

// Quiet: Graphile Worker logs every job at info.
const quiet = new Logger(() => (level, message) => {
  if (level === 'error' || level === 'warning') console.error(`graphile: ${message}`);
});

await scratch.run('graphile', bench);

async function bench() {
  const utils = await makeWorkerUtils({
    connectionString: databaseUrl.toString(), maxPoolSize: inFlight, logger: quiet,
  });
  await utils.migrate();

  // When each entity's last event was added: its job is due at that time + the window.
  const lastAdd = new Map();
  const processed = new Map();
  const lags = [];
  let delivered = 0;
  let lastProcessed = 0;
  const runner = await run({
    preset: { worker: { connectionString: databaseUrl.toString(), ...worker } },
    noHandleSignals: true,
    logger: quiet,
    taskList: {
      evaluate: async (payload) => {
        const now = Date.now();
        const entity = payload[0].entity;
        processed.set(entity, (processed.get(entity) ?? 0) + 1);
        delivered += payload.length;
        lags.push(now - (lastAdd.get(entity) + windowMs));
        lastProcessed = now;
      },
    },
  });

  const walBefore = await walLsn();
  // Entities in round-robin order: each gets events / entities events spread over the run.
  const started = Date.now();
  let next = 0;
  // Events handed to an add (all of them, unless --max-seconds stopped the adds).
  let added = 0;
  async function adder() {
    while (true) {
      const first = next;
      next += batch;
      if (first >= events) return;
      if (maxSeconds > 0 && Date.now() - started > maxSeconds * 1000) {
        next = events;
        return;
      }
      added = Math.max(added, Math.min(first + batch, events));
      if (rate > 0) {
        const wait = started + (first / rate) * 1000 - Date.now();
        if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      }
      const runAt = new Date(Date.now() + windowMs);
      const perEntity = new Map();
      for (let i = first; i < Math.min(first + batch, events); i++) {
        const entity = `post:${i % entities}`;
        if (!perEntity.has(entity)) perEntity.set(entity, []);
        perEntity.get(entity).push({ entity, event: i });
      }
      const now = Date.now();
      for (const entity of perEntity.keys()) lastAdd.set(entity, now);
      await addDebounced(utils, mode, perEntity, runAt);
    }
  }
  await Promise.all(Array.from({ length: inFlight }, adder));
  const addSeconds = (Date.now() - started) / 1000;
  const walAfterAdds = await walLsn();

  // Until every event was delivered to a job, then a quiet second more (so that a job that
  // should not run would be counted); or, with events missing, until nothing ran for 5 s past
  // the last due time.
  const addsEnded = Date.now();
  const deadline = addsEnded + windowMs * 10 + 120000;
  while (Date.now() < deadline) {
    if (delivered >= added && Date.now() - lastProcessed > 1000) break;
    if (Date.now() - Math.max(lastProcessed, addsEnded + windowMs) > 5000) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  const drainSeconds = (Date.now() - started) / 1000 - addSeconds;
  const walAfterJobs = await walLsn();
  await runner.stop();
  // Jobs still in the table (not run, or failed): events in them are not lost but late.
  const left = await utils.withPgClient((client) =>
    client.query('SELECT count(*)::int AS jobs, coalesce(sum(json_array_length(payload)), 0)::int AS events FROM graphile_worker._private_jobs'));
  await utils.release();

  lags.sort((a, b) => a - b);
  const pick = (q) => (lags.length ? lags[Math.min(lags.length - 1, Math.floor(q * lags.length))] : null);
  const jobs = [...processed.values()].reduce((a, b) => a + b, 0);
  const version = JSON.parse(readFileSync(new URL('./node_modules/graphile-worker/package.json', import.meta.url))).version;
  return {
    peer: `graphile-worker ${version}`, mode, batch, settings: worker,
    events: added, events_planned: events, entities, window_ms: windowMs, in_flight: inFlight,
    rate: rate || null, add_seconds: addSeconds, adds_per_second: added / addSeconds,
    // Entities that received an event (fewer than --entities when --max-seconds stopped early).
    jobs, entities_evaluated: processed.size, entities_added: Math.min(added, entities),
    jobs_per_entity: jobs / Math.min(added, entities), jobs_per_event: jobs / added,
    events_delivered: delivered, jobs_left: left.rows[0].jobs, events_in_jobs_left: left.rows[0].events,
    events_lost: added - delivered - left.rows[0].events, drain_seconds: drainSeconds,
    fire_lag_ms: { p50: pick(0.5), p99: pick(0.99), max: lags.length ? lags[lags.length - 1] : null },
    // The whole server's WAL (other databases' writes included), per event added.
    wal_bytes_per_event_adds: (await walDiff(walBefore, walAfterAdds)) / added,
    wal_bytes_per_event_with_jobs: (await walDiff(walBefore, walAfterJobs)) / added,
  };
}
