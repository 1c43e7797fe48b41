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
