// The BullMQ peer doing quiesce's work: the debounce of bench.js (deduplication in debounce
// mode: extend + replace + delay), with each job doing what a platform would write to get
// quiesce's decision (../decide.mjs): read the entity's counts per type from Postgres, run the
// default rules, record the decision, take a version-checked action. The adds are the
// platform's ingest: a request's events are inserted into Postgres (one statement), then a job
// is added for each event as bench.js adds it. bench.js stays the scheduler-only reference.
// Prints one JSON line.
//
//   node work.js --redis redis://127.0.0.1:6379 --database-url postgres://postgres@127.0.0.1:5432/postgres \
//                --database bullmq_work_<id> --prefix bench-bullmq-work-<id> --events 100000 \
//                --entities 50000 [--window-ms 2000] [--batch 100] [--in-flight 16] \
//                [--concurrency 50] [--pool 20] [--seed 1] [--rate 2000] [--max-drain-seconds 300]
//
// Event i goes to entity post:<i % entities> with the type quiesce's load generator gives event
// i of `--scenario burst` with the same seed (../plan.mjs). --database is created on the server
// of --database-url and dropped at the end; the queue's keys under --prefix are obliterated.
// --batch events make one ingest request, as quiesce's load generator sends the burst (100 a
// request); --in-flight requests are under way at once, each with an ingest connection of its
// own (--batch 1 --in-flight 256: one insert per event, bench.js's adds in flight).
// Settings and where they come from: ../SETTINGS.md.
import { readFileSync } from 'fs';
import { Queue, Worker } from 'bullmq';
import IORedis from 'ioredis';
import pg from 'pg';
import { options, scratchDatabase, sendBatches } from '../common.mjs';

import { Jobs, SCHEMA, evaluate, ingest, outcome } from '../decide.mjs';
import { burstSignals } from '../plan.mjs';

const args = options();
const redisUrl = new URL(args.redis ?? 'redis://127.0.0.1:6379');
const client = () => new IORedis(redisUrl.toString(), { maxRetriesPerRequest: null });
const serverUrl = new URL(args['database-url'] ?? 'postgres://postgres@127.0.0.1:5432/postgres');
const database = args.database ?? `bullmq_work_${process.pid}`;
const events = Number(args.events ?? 100000);
const entities = Number(args.entities ?? 50000);
const windowMs = Number(args['window-ms'] ?? 2000);
const batch = Number(args.batch ?? 100);
const inFlight = Number(args['in-flight'] ?? 16);
const prefix = args.prefix ?? `bench-bullmq-work-${process.pid}`;
const rate = Number(args.rate ?? 0);
const seed = Number(args.seed ?? 1);
const maxDrainSeconds = Number(args['max-drain-seconds'] ?? 300);
// BullMQ's concurrency page sets `concurrency: 50` for async (I/O-bound) processors; the job
// pool is node-postgres's size for a service with a fixed instance count (SETTINGS.md).
const settings = {
  concurrency: Number(args.concurrency ?? 50),
  pool: Number(args.pool ?? 20),
  batch,
  in_flight: inFlight,
  // The platform's side, not BullMQ's: a connection per request in flight, within what the
  // server allows.
  ingest_pool: Number(args['ingest-pool'] ?? Math.min(inFlight, 16)),
};

const scratch = scratchDatabase(pg, serverUrl, database);
const { admin, url: databaseUrl } = scratch;

await scratch.run('bullmq work', bench);

async function bench() {
  const ingestPool = new pg.Pool({ connectionString: databaseUrl.toString(), max: settings.ingest_pool });
  const jobPool = new pg.Pool({ connectionString: databaseUrl.toString(), max: settings.pool });
  // An idle client's error (the database dropped under it) is not the run's error.
  for (const pool of [ingestPool, jobPool]) pool.on('error', (e) => console.error(`bullmq work: idle client: ${e.message}`));
  const queue = new Queue('debounce', { connection: client(), prefix });
  let worker;
  try {
    return await measure(ingestPool, jobPool, queue, (w) => (worker = w));
  } finally {
    // On failure too: no key of the prefix and no client of the database is left behind.
    await worker?.close(true);
    await queue.obliterate({ force: true });
    await queue.close();
    await ingestPool.end();
    await jobPool.end();
  }
}

async function measure(ingestPool, jobPool, queue, onWorker) {
  await ingestPool.query(SCHEMA);
  const signals = burstSignals(events, seed);

  const tally = new Jobs(windowMs);

  const worker = new Worker(
    'debounce',
    async (job) => {
      const entity = job.data.entity;
      await tally.run(entity, async () => {
        const c = await jobPool.connect();
        try {
          return await evaluate(c, entity);
        } catch (error) {
          console.error(`bullmq work: job for ${entity} failed: ${error.message}`);
          throw error;
        } finally {
          c.release();
        }
      }, job.timestamp);
    },
    { connection: client(), prefix, concurrency: settings.concurrency },
  );
  onWorker(worker);
  await worker.waitUntilReady();

  const addSeconds = await sendBatches({ events, batch, inFlight, rate }, async (first, end) => {
    const indexes = [];
    for (let i = first; i < end; i++) indexes.push(i);
    await ingest(ingestPool, indexes.map((i) => [String(i), `post:${i % entities}`, signals[i], `user:${i % 997}`]));
    await Promise.all(indexes.map((i) => {
      const entity = `post:${i % entities}`;
      tally.added(entity);
      return queue.add(
        'evaluate',
        { entity, event: i },
        { delay: windowMs, deduplication: { id: entity, ttl: windowMs, extend: true, replace: true },
          removeOnComplete: true, removeOnFail: true },
      );
    }));
  });

  await tally.drained(maxDrainSeconds);
  await worker.close();
  const checked = await outcome(ingestPool, signals, entities);

  const version = JSON.parse(readFileSync(new URL('./node_modules/bullmq/package.json', import.meta.url))).version;
  return {
    peer: `bullmq ${version}`, mode: 'work', settings,
    events, entities, window_ms: windowMs, seed, rate: rate || null,
    add_seconds: addSeconds, adds_per_second: events / addSeconds,
    ...tally.figures(entities), ...checked,
  };
}
