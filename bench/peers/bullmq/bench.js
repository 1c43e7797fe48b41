// The BullMQ peer of `make bench`: the most used Redis debounce, BullMQ's deduplication in
// debounce mode (extend + replace + delay), on the workload quiesce runs. Prints one JSON line.
//
//   node bench.js --redis redis://127.0.0.1:6379 --events 100000 --entities 10000 \
//                 --window-ms 2000 --in-flight 256 --prefix bench-bullmq-<id> [--rate 2000]
//
// With --rate the adds are paced at that many per second (fire lag with due times spread out).
import { Queue, Worker } from 'bullmq';
import IORedis from 'ioredis';

import { options } from '../common.mjs';

const args = options();
const redisUrl = new URL(args.redis ?? 'redis://127.0.0.1:6379');
// BullMQ 6 takes ready clients in native ESM; workers need maxRetriesPerRequest: null.
const client = () => new IORedis(redisUrl.toString(), { maxRetriesPerRequest: null });
const events = Number(args.events ?? 100000);
const entities = Number(args.entities ?? 10000);
const windowMs = Number(args['window-ms'] ?? 2000);
const inFlight = Number(args['in-flight'] ?? 256);
const prefix = args.prefix ?? `bench-bullmq-${process.pid}`;
const concurrency = Number(args.concurrency ?? 64);
const rate = Number(args.rate ?? 0);

const queue = new Queue('debounce', { connection: client(), prefix });
// When each entity's last event was added: its job is due at that time + the window.
const lastAdd = new Map();
const processed = new Map();
const lags = [];
let done;
const finished = new Promise((resolve) => (done = resolve));
// Wait until every entity had a job processed after its last event, then a quiet second more
// (so that duplicate jobs would be counted).
let lastProcessed = 0;

const worker = new Worker(
  'debounce',
  async (job) => {
    const now = Date.now();
    const entity = job.data.entity;
    processed.set(entity, (processed.get(entity) ?? 0) + 1);
    const due = (lastAdd.get(entity) ?? job.timestamp) + windowMs;
    lags.push(now - due);
    lastProcessed = now;
  },
  { connection: client(), prefix, concurrency },
);
await worker.waitUntilReady();

// Entities in round-robin order: each gets events / entities events spread over the run.
const started = Date.now();
let next = 0;
async function adder() {
  while (true) {
    const i = next++;
    if (i >= events) return;
    if (rate > 0) {
      const wait = started + (i / rate) * 1000 - Date.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    }
    const entity = `post:${i % entities}`;
    lastAdd.set(entity, Date.now());
    await queue.add(
      'evaluate',
      { entity, event: i },
      { delay: windowMs, deduplication: { id: entity, ttl: windowMs, extend: true, replace: true },
        removeOnComplete: true, removeOnFail: true },
    );
  }
}
await Promise.all(Array.from({ length: inFlight }, adder));
const addSeconds = (Date.now() - started) / 1000;

const deadline = Date.now() + windowMs * 10 + 60000;
while (Date.now() < deadline) {
  if (processed.size >= entities && Date.now() - lastProcessed > 1000) break;
  await new Promise((r) => setTimeout(r, 100));
}
await worker.close();
await queue.obliterate({ force: true });
await queue.close();

lags.sort((a, b) => a - b);
const pick = (q) => (lags.length ? lags[Math.min(lags.length - 1, Math.floor(q * lags.length))] : null);
const jobs = [...processed.values()].reduce((a, b) => a + b, 0);
console.log(JSON.stringify({
  peer: `bullmq ${JSON.parse((await import('fs')).readFileSync(new URL('./node_modules/bullmq/package.json', import.meta.url))).version}`,
  events, entities, window_ms: windowMs, in_flight: inFlight, rate: rate || null,
  add_seconds: addSeconds, adds_per_second: events / addSeconds,
  jobs, entities_evaluated: processed.size, jobs_per_entity: jobs / entities,
  fire_lag_ms: { p50: pick(0.5), p99: pick(0.99), max: lags.length ? lags[lags.length - 1] : null },
}));
process.exit(0);
