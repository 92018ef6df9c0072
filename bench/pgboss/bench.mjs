// pg-boss on the PostgreSQL database `--db` names, running the workloads of
// `sqlq bench --scorecard` that pg-boss has a way to do, with the same
// counts, callers and durations: the reference column of the scorecard
// (scripts/bench-scorecard.sh, docs/benchmarks.md).
//
//   node bench/pgboss/bench.mjs --db postgresql://USER:PASS@HOST/DB \
//       [--runs 3] [--messages N] [--duration 10] [--json]
//
// Each workload runs on queues of its own, made for the run and deleted
// after it; every workload checks that what it measured happened (every
// message sent is stored, every one taken is taken once) and exits non-zero
// otherwise. pg-boss's tables go in a schema of their own,
// sqlq_bench_pgboss, dropped at the end (a schema of that name that was
// there before is replaced). pg-boss runs as its documentation shows: one PgBoss instance
// (one Node.js process) with a connection pool as large as the callers it
// serves, and a job completed with `complete` after `fetch`. Consumers that
// find the queue empty wait for the next send of the same process (an
// in-process signal, or 100 ms): quicker than pg-boss's own `work()`, which
// polls no more often than every half second, so the figures favour
// pg-boss.
import { PgBoss } from 'pg-boss';
import pg from 'pg';

const usage = `usage: node bench/pgboss/bench.mjs --db URL [--runs N] [--messages N] [--duration SECONDS] [--json]`;

function parseArgs(argv) {
  const o = { db: '', runs: 3, messages: 0, duration: 10, json: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    const count = (name, v) => {
      const n = Number(v);
      if (!Number.isInteger(n) || n < 0) throw new Error(`${name}: '${v}' is not a whole number ≥ 0`);
      return n;
    };
    if (a === '--db') o.db = value();
    else if (a === '--runs') o.runs = Math.max(1, count(a, value()));
    else if (a === '--messages') o.messages = count(a, value());
    else if (a === '--duration') o.duration = Math.max(1, count(a, value().replace(/s$/, '')));
    else if (a === '--json') o.json = true;
    else if (a === '--help' || a === '-h') { console.log(usage); process.exit(0); }
    else throw new Error(`unknown option '${a}'`);
  }
  if (!/^postgres(ql)?:\/\//.test(o.db)) throw new Error('--db must name a PostgreSQL database (postgresql://...)');
  return o;
}

const opts = (() => {
  try {
    return parseArgs(process.argv.slice(2));
  } catch (e) {
    console.error(`pg-boss bench: ${e.message}\n${usage}`);
    process.exit(2);
  }
})();

const schema = 'sqlq_bench_pgboss';

async function dropSchema() {
  const c = new pg.Client({ connectionString: opts.db });
  await c.connect();
  try { await c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`); } finally { await c.end(); }
}

// 100-byte payloads, as sqlq bench sends.
const payload = { p: 'x'.repeat(92) };
let queueSerial = 0;
const newQueueName = (what) => `bench_${process.pid}_${++queueSerial}_${what.replace(/[^a-z0-9]/gi, '_')}`;

class Failure extends Error {}
function check(ok, what) { if (!ok) throw new Failure(what); }

// Stores k jobs in one call.
const insert = (boss, name, k) => boss.insert(name, Array.from({ length: k }, () => ({ data: payload })));

// Fills the queue (not timed), 1,000 jobs a call.
const fill = (boss, name, n) => shared(1, n, 1000, (k) => insert(boss, name, k));

// Jobs of the queue waiting to be taken, counted in the table (pg-boss's
// queue statistics are a cached gauge).
async function queued(boss, name) {
  const { rows } = await boss.getDb().executeSql(
    `SELECT count(*)::int AS n FROM ${schema}.job WHERE name = $1 AND state = 'created'`, [name]);
  return rows[0].n;
}

// Runs `callers` loops of `body(i)` until each returns false; seconds taken.
async function timed(callers, body) {
  const t0 = performance.now();
  await Promise.all(Array.from({ length: callers }, async (_, i) => { while (await body(i)); }));
  return (performance.now() - t0) / 1000;
}

// `callers` loops sharing `total` items, `per` at a time: `call(k)` for each
// share of k; seconds taken.
function shared(callers, total, per, call) {
  let left = total;
  return timed(callers, async () => {
    if (left <= 0) return false;
    const k = Math.min(per, left);
    left -= k;
    await call(k);
    return true;
  });
}

async function sendOne(boss, n, callers) {
  const name = newQueueName('send1');
  await boss.createQueue(name);
  const s = await shared(callers, n, 1, () => boss.send(name, payload));
  const q = await queued(boss, name);
  check(q === n, `send-1: ${n} sent, ${q} queued`);
  await boss.deleteQueue(name);
  return n / s;
}

async function sendBatch(boss, n, callers, per) {
  const name = newQueueName('sendbatch');
  await boss.createQueue(name);
  const s = await shared(callers, n, per, (k) => insert(boss, name, k));
  const q = await queued(boss, name);
  check(q === n, `send-batch: ${n} sent, ${q} queued`);
  await boss.deleteQueue(name);
  return n / s;
}

async function drain(boss, n, per) {
  const name = newQueueName(`drain${per}`);
  await boss.createQueue(name);
  await fill(boss, name, n);
  const seen = new Set();
  const s = await timed(1, async () => {
    const jobs = await boss.fetch(name, { batchSize: per });
    if (jobs.length === 0) return false;
    for (const j of jobs) { check(!seen.has(j.id), `drain-${per}: job ${j.id} taken twice`); seen.add(j.id); }
    await boss.complete(name, jobs.map((j) => j.id));
    return true;
  });
  check(seen.size === n, `drain-${per}: ${n} waiting, ${seen.size} taken`);
  await boss.deleteQueue(name);
  return n / s;
}

// P producers sending one message a call and C consumers taking and
// completing one at a time, for `seconds`; producers pause while more than
// 4 × C messages wait (as sqlq bench's mixed and workers loads do). Rate =
// messages completed in the window.
async function pairs(boss, producers, consumers, seconds) {
  const name = newQueueName(`pairs${producers}x${consumers}`);
  await boss.createQueue(name);
  const cap = 4 * consumers;
  let sent = 0, completed = 0, inWindow = 0, stop = false;
  const seen = new Set();
  let wakeConsumers = [], wakeProducers = [];
  const signal = (list) => { for (const r of list.splice(0)) r(); };
  const waitOn = (list, ms) => new Promise((r) => {
    const t = setTimeout(r, ms);
    list.push(() => { clearTimeout(t); r(); });
  });
  // The pool's connections opened before the window, as sqlq bench's
  // callers have theirs: opening 64 takes pg-boss about a second.
  const db = boss.getDb();
  await Promise.all(Array.from({ length: producers + consumers }, () => db.executeSql('SELECT 1')));
  const t0 = performance.now();
  const end = t0 + seconds * 1000;
  setTimeout(() => { stop = true; signal(wakeConsumers); signal(wakeProducers); }, seconds * 1000);
  const produce = async () => {
    while (!stop) {
      if (sent - completed > cap) { await waitOn(wakeProducers, 100); continue; }
      sent++;
      await boss.send(name, payload);
      signal(wakeConsumers);
    }
  };
  const consume = async () => {
    while (!stop) {
      const jobs = await boss.fetch(name, { batchSize: 1 });
      if (jobs.length === 0) { await waitOn(wakeConsumers, 100); continue; }
      for (const j of jobs) { check(!seen.has(j.id), `pairs: job ${j.id} taken twice`); seen.add(j.id); }
      await boss.complete(name, jobs.map((j) => j.id));
      completed += jobs.length;
      if (performance.now() <= end) inWindow += jobs.length;
      signal(wakeProducers);
    }
  };
  await Promise.all([
    ...Array.from({ length: producers }, produce),
    ...Array.from({ length: consumers }, consume),
  ]);
  check(inWindow > 0, 'pairs: nothing completed');
  const q = await queued(boss, name);
  check(completed + q === sent, `pairs: ${sent} sent, ${completed} completed, ${q} still queued`);
  await boss.deleteQueue(name);
  return inWindow / seconds;
}

// T callers publishing one message each call to an event `queues` queues
// subscribe to; each publish counts once per queue.
async function publish(boss, n, callers, queues) {
  const event = newQueueName('event');
  const names = [];
  for (let i = 0; i < queues; i++) {
    const name = newQueueName(`sub${i}`);
    await boss.createQueue(name);
    await boss.subscribe(event, name);
    names.push(name);
  }
  const publishes = Math.ceil(n / queues);
  const s = await shared(callers, publishes, 1, () => boss.publish(event, payload));
  for (const name of names) {
    const q = await queued(boss, name);
    check(q === publishes, `publish: ${publishes} published, ${q} in ${name}`);
    await boss.unsubscribe(event, name);
    await boss.deleteQueue(name);
  }
  return (publishes * queues) / s;
}

// The scorecard's lines pg-boss can run, under the names sqlq bench
// --scorecard gives sqlq's side of each (so the scorecard can set them
// side by side), with the scorecard's counts.
const workloads = [
  ['send-1', (b, m) => sendOne(b, m(5000), 1)],
  ['send-100', (b, m) => sendBatch(b, m(200000), 1, 100)],
  ['drain-1', (b, m) => drain(b, m(5000), 1)],
  ['drain-10', (b, m) => drain(b, m(10000), 10)],
  ['mixed 2+2', (b) => pairs(b, 2, 2, opts.duration)],
  ['send-batch x4', (b, m) => sendBatch(b, m(200000), 4, 100)],
  ['workers 32+32', (b) => pairs(b, 32, 32, opts.duration)],
  ['publish', (b, m) => publish(b, m(30000), 4, 10)],
];

const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor(s.length / 2)]; };

async function main() {
  // As many connections as the most callers a workload has (64 for
  // workers 32+32), plus pg-boss's own upkeep.
  await dropSchema();
  const boss = new PgBoss({ connectionString: opts.db, schema, max: 70 });
  let failed = null;
  boss.on('error', (e) => { failed = failed ?? e; });
  await boss.start();
  const m = (n) => (opts.messages > 0 ? opts.messages : n);
  if (!opts.json) console.log(`pg-boss on ${opts.db.replace(/:[^:@/]*@/, ':***@')}, median of ${opts.runs} run(s), msgs/s`);
  try {
    for (const [name, run] of workloads) {
      const rates = [];
      for (let r = 0; r < opts.runs; r++) {
        rates.push(await run(boss, m));
        if (failed) throw failed;
      }
      const line = { bench: 'pg-boss', workload: name, msgs_per_s: Math.round(median(rates)), runs: rates.map(Math.round) };
      console.log(opts.json ? JSON.stringify(line) : `${name.padEnd(16)} ${line.msgs_per_s.toLocaleString('en-US').padStart(9)}   (${line.runs.join(', ')})`);
    }
  } finally {
    await boss.stop({ graceful: false, wait: true });
    await dropSchema();
  }
}

main().catch((e) => {
  console.error(`pg-boss bench: ${e instanceof Failure ? 'check failed: ' : ''}${e.message ?? e}`);
  process.exit(1);
});
