// What the peer scripts share: their `--name value` options, and a database of their own on the
// shared Postgres server, created for the run and dropped after it. The `pg` module is passed in:
// each peer has its own node_modules, and this file lies beside them, not in one.

// `--name value` pairs of the command line, by name.
export function options(argv = process.argv.slice(2)) {
  return Object.fromEntries(
    argv.reduce((pairs, arg, i, all) => {
      if (arg.startsWith('--')) pairs.push([arg.slice(2), all[i + 1]]);
      return pairs;
    }, []),
  );
}

// The database `name` on the server of `serverUrl` (a postgres:// URL of any database there):
// its URL, `admin(sql)` on the server, `create()` (dropping a leftover of the same name first)
// and `drop()`.
export function scratchDatabase(pg, serverUrl, name) {
  if (!/^[a-z0-9_]+$/.test(name)) throw new Error(`--database: ${name} is not [a-z0-9_]+`);
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  async function admin(sql) {
    const client = new pg.Client({ connectionString: serverUrl.toString() });
    await client.connect();
    try {
      return await client.query(sql);
    } finally {
      await client.end();
    }
  }
  return {
    url,
    admin,
    async create() {
      await admin(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
      await admin(`CREATE DATABASE "${name}"`);
    },
    // Pools resolve their end() before the server has seen every connection close; a client
    // still closing when the drop forces it out raises an error nobody listens to, which ends
    // the process. So the drop waits for them first (5 s at most).
    async drop() {
      for (let waited = 0; waited < 5000; waited += 100) {
        const { rows } = await admin(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = '${name}'`);
        if (rows[0].n === 0) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      await admin(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
    },
    // Makes the database, runs `bench`, drops the database (also when the run fails), prints
    // the result as one JSON line and ends the process (the peers' clients keep it alive).
    async run(label, bench) {
      await this.create();
      let result;
      try {
        result = await bench();
      } catch (error) {
        console.error(`${label}: ${error.stack}`);
        process.exitCode = 1;
      } finally {
        await this.drop();
      }
      if (result) console.log(JSON.stringify(result));
      process.exit();
    },
  };
}

// Sends events 0..events-1 in batches of `batch`, `inFlight` batches under way at once, paced at
// `rate` events a second when it is set: `send(first, end)` sends events first..end-1. Resolves
// with the seconds the sending took.
export async function sendBatches({ events, batch, inFlight, rate }, send) {
  const started = Date.now();
  let next = 0;
  async function sender() {
    while (true) {
      const first = next;
      next += batch;
      if (first >= events) return;
      if (rate > 0) {
        const wait = started + (first / rate) * 1000 - Date.now();
        if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      }
      await send(first, Math.min(first + batch, events));
    }
  }
  await Promise.all(Array.from({ length: inFlight }, sender));
  return (Date.now() - started) / 1000;
}
