// BullMQ, unchanged, against the server on PORT: a queue, a worker, a delayed job, a job that
// fails and is retried, and results read back through QueueEvents (BullMQ's event stream).
// Prints `ok ...` and exits 0; any failure throws (exit 1) with the reason.
//
// Usage: node bullmq_check.mjs PORT
import { Queue, QueueEvents, Worker } from 'bullmq';

const port = Number(process.argv[2]);
const connection = { host: '127.0.0.1', port, maxRetriesPerRequest: null };
// Bounded waits: every job is awaited at most this long.
const TIMEOUT_MS = 60_000;

function assert(condition, message) {
  if (!condition) throw new Error(`check failed: ${message}`);
}

async function main() {
  const queue = new Queue('prefixkv-check', { connection });
  // Twenty jobs awaited at once add a listener each.
  queue.setMaxListeners(64);
  const events = new QueueEvents('prefixkv-check', { connection });
  events.setMaxListeners(64);
  await events.waitUntilReady();
  const attempts = new Map();
  const worker = new Worker(
    'prefixkv-check',
    async (job) => {
      if (job.name === 'flaky') {
        const n = (attempts.get(job.id) ?? 0) + 1;
        attempts.set(job.id, n);
        if (n === 1) throw new Error('the first attempt fails');
        return `done after ${n} attempts`;
      }
      if (job.name === 'fail') throw new Error('this job always fails');
      if (job.name === 'stamp') return Date.now();
      return job.data.x + job.data.y;
    },
    { connection, concurrency: 2 },
  );
  try {
    const add = await queue.add('add', { x: 2, y: 3 });
    assert((await add.waitUntilFinished(events, TIMEOUT_MS)) === 5, 'add 2 + 3');

    const flaky = await queue.add('flaky', {}, { attempts: 3, backoff: { type: 'fixed', delay: 100 } });
    const retried = await flaky.waitUntilFinished(events, TIMEOUT_MS);
    assert(retried === 'done after 2 attempts', `retry gave ${retried}`);

    const sent = Date.now();
    const delayed = await queue.add('stamp', {}, { delay: 1000 });
    const ran = await delayed.waitUntilFinished(events, TIMEOUT_MS);
    assert(ran >= sent + 900, `the delayed job ran ${ran - sent} ms after it was added`);

    const failing = await queue.add('fail', {}, { attempts: 1 });
    let failedWith = null;
    try {
      await failing.waitUntilFinished(events, TIMEOUT_MS);
    } catch (error) {
      failedWith = error.message;
    }
    assert(failedWith && failedWith.includes('always fails'), `failure gave ${failedWith}`);
    assert((await queue.getJobState(failing.id)) === 'failed', 'the failed job is in failed');

    const many = await queue.addBulk(
      Array.from({ length: 20 }, (_, i) => ({ name: 'add', data: { x: i, y: i } })),
    );
    const results = await Promise.all(many.map((job) => job.waitUntilFinished(events, TIMEOUT_MS)));
    assert(results.every((value, i) => value === 2 * i), `bulk results ${results}`);
    const counts = await queue.getJobCounts('completed', 'failed', 'waiting', 'delayed');
    assert(counts.completed === 23 && counts.failed === 1, `counts ${JSON.stringify(counts)}`);
    console.log(`ok bullmq: a result, a retry, a delayed job (${ran - sent} ms), a failure, 20 jobs`);
  } finally {
    await worker.close();
    await events.close();
    await queue.close();
  }
}

main().then(
  () => process.exit(0),
  (error) => {
    console.error(error);
    process.exit(1);
  },
);
