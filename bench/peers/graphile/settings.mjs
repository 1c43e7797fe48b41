// The Graphile Worker configuration both Graphile peers run (bench.js, work.js): the one of the
// "Performance" page of its documentation (its fastest measured setup), with the poll interval
// lowered: a debounced job is due in the future, and a job that becomes due is found by a poll
// (the NOTIFY of an add arrives before it is due). Each is an option of the scripts; where each
// value comes from: ../SETTINGS.md.
export function workerSettings(args) {
  return {
    concurrentJobs: Number(args.concurrency ?? 24),
    maxPoolSize: Number(args['max-pool-size'] ?? 25),
    localQueue: { size: Number(args['local-queue-size'] ?? 500) },
    completeJobBatchDelay: Number(args['complete-job-batch-delay'] ?? 0),
    failJobBatchDelay: Number(args['fail-job-batch-delay'] ?? 0),
    pollInterval: Number(args['poll-interval'] ?? 100),
  };
}

// Adds (or pushes back) the debounced `evaluate` job of each entity of `perEntity` (entity ->
// payload), due at `runAt`: one addJobs call in batched mode, else the one entity's addJob with
// jobKeyMode 'replace' (the documented debounce).
export async function addDebounced(utils, mode, perEntity, runAt) {
  if (mode === 'batched') {
    // addJobs takes no jobKeyMode: a job key always replaces (run_at included).
    await utils.addJobs([...perEntity].map(([entity, payload]) => ({
      identifier: 'evaluate', payload, jobKey: entity, runAt,
    })));
  } else {
    const [[entity, payload]] = perEntity;
    await utils.addJob('evaluate', payload, { jobKey: entity, jobKeyMode: 'replace', runAt });
  }
}
