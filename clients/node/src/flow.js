// Workflows: jobs that wait for other jobs, sent in one transaction
// (POST /v1/messages). A job is {queue, payload, ...a send's options};
// chain, group and chord take jobs or workflows; a Workflow is any graph,
// each job added after its parents, so it never has a cycle.
//
//   await client.sendFlow(chain({ queue: "fetch", payload: "a.png" },
//                               { queue: "resize", payload: "a.png" }));
//   const w = new Workflow();
//   const a = w.add({ queue: "fetch", payload: "a.png" });
//   const b = w.add({ queue: "fetch", payload: "b.png" });
//   w.add({ queue: "stitch", payload: "a+b", kind: "stitch" }, { after: [a, b] });
//   const { ids } = await w.send(client);   // ids[step.index]

import { randomUUID } from "node:crypto";
import { PARENTS_HEADER } from "./client.js";

// The header that carries the id of the workflow a job was sent in.
export const WORKFLOW_HEADER = "sqlq-workflow";

// A job added to a workflow: its id is sent.ids[index].
export class Step {
  constructor(workflow, index, job) {
    Object.defineProperty(this, "workflow", { value: workflow, enumerable: false });
    this.index = index;
    this.job = job;
  }
}

function checkJob(job) {
  if (job === null || typeof job !== "object" || !job.queue) {
    throw new TypeError("a job is {queue, payload, ...options}: it names its queue");
  }
  if ("dependsOnBatch" in job) {
    throw new TypeError("a workflow sets dependsOnBatch: name a job's parents with add(job, {after})");
  }
}

export class Workflow {
  constructor() {
    // Every job carries it (header sqlq-workflow): find() and cancel().
    this.id = randomUUID().replaceAll("-", "");
    this.steps = [];
    this._in = []; // parents in the workflow, by index
    this._out = []; // parents sent before: an id, or {queue, id}
  }

  get length() { return this.steps.length; }

  // Adds `job`, to run once every parent in `after` has completed: a Step
  // of this workflow, or a message sent before (an id, or {queue, id} so
  // that the job can read its result with message.parentResults()).
  add(job, { after = [] } = {}) {
    checkJob(job);
    const inner = [];
    const outer = [];
    for (const p of after) {
      if (p instanceof Step) {
        if (p.workflow !== this) throw new Error("a parent is a job of another workflow");
        if (!inner.includes(p.index)) inner.push(p.index);
      } else if (Number.isInteger(p)) {
        outer.push(p);
      } else if (p && typeof p.queue === "string" && Number.isInteger(p.id)) {
        outer.push({ queue: p.queue, id: p.id });
      } else {
        throw new TypeError(`not a parent (a Step, an id or {queue, id}): ${JSON.stringify(p)}`);
      }
    }
    const step = new Step(this, this.steps.length, job);
    this.steps.push(step);
    this._in.push(inner);
    this._out.push(outer);
    return step;
  }

  _tails() {
    const used = new Set(this._in.flat());
    return this.steps.map((s) => s.index).filter((i) => !used.has(i));
  }

  // Adds `item` (a job, or a copy of a workflow's jobs) after the steps of
  // `after`; returns its last steps (those nothing of it waits for).
  _put(item, after) {
    if (!(item instanceof Workflow)) return [this.add(item, { after })];
    if (item === this) throw new Error("a workflow cannot contain itself");
    const mine = [];
    item.steps.forEach((s, i) => {
      const parents = [...item._in[i].map((p) => mine[p]), ...item._out[i]];
      if (item._in[i].length === 0) parents.push(...after);
      mine.push(this.add(s.job, { after: parents }));
    });
    return item._tails().map((i) => mine[i]);
  }

  // The messages of POST /v1/messages (client.sendAll).
  messages() {
    return this.steps.map((s, i) => {
      const m = { ...s.job };
      const ids = [...(m.dependsOn ?? []), ...this._out[i].map((p) => (Number.isInteger(p) ? p : p.id))];
      if (ids.length) m.dependsOn = ids;
      if (this._in[i].length) m.dependsOnBatch = [...this._in[i]];
      m.headers = { ...(m.headers ?? {}), [WORKFLOW_HEADER]: this.id };
      const named = this._out[i].filter((p) => !Number.isInteger(p));
      if (named.length) m.headers[PARENTS_HEADER] = named.map((p) => `${p.queue}:${p.id}`).join(",");
      return m;
    });
  }

  // The queues of its jobs, each once.
  queues() { return [...new Set(this.steps.map((s) => s.job.queue))]; }
  // findWorkflow(client, this.id, this.queues()).
  async find(client) { return findWorkflow(client, this.id, this.queues()); }
  // cancelWorkflow(client, this.id, this.queues()).
  async cancel(client) { return cancelWorkflow(client, this.id, this.queues()); }
  // retryWorkflow(client, this.id, this.queues()).
  async retry(client) { return retryWorkflow(client, this.id, this.queues()); }

  // Sends every job in one transaction: all are stored, or none → {ids,
  // duplicate}, ids in the order the jobs were added.
  async send(client) {
    if (this.steps.length === 0) throw new Error("an empty workflow sends nothing");
    return client.sendAll(this.messages());
  }
}

// Each item runs once the one before it has completed.
export function chain(...items) {
  const w = new Workflow();
  let last = [];
  for (const it of items) last = w._put(it, last);
  return w;
}

// The items side by side, none waiting for another.
export function group(...items) {
  const w = new Workflow();
  for (const it of items) w._put(it, []);
  return w;
}

// `callback` runs once every member has completed (a fan-in).
export function chord(members, callback) {
  return chain(members instanceof Workflow ? members : group(...members), callback);
}

// The jobs of workflow `id` still in `queues` (waiting, ready, delayed or
// leased; not those completed or dead), as the listing's objects, each
// with its `queue`.
export async function findWorkflow(client, id, queues) {
  const out = [];
  for (const q of queues) {
    for await (const m of client.queue(q).iterMessages({ header: { name: WORKFLOW_HEADER, value: id } })) {
      out.push({ ...m, queue: q });
    }
  }
  return out;
}

// Cancels every job of workflow `id` still in `queues` (each a dead letter
// with the error "cancelled") → how many. Those completed stay so.
export async function cancelWorkflow(client, id, queues) {
  let n = 0;
  // The waiting ones first, those none of the others waits for before the
  // ones they wait for: no cancel releases one of them (or runs it, with
  // ifDependencyDies "run").
  const waiting = new Map((await findWorkflow(client, id, queues))
    .filter((m) => m.state === "waiting").map((m) => [m.id, m]));
  while (waiting.size) {
    const held = new Set([...waiting.values()].flatMap((m) => m.waitsFor ?? []));
    let leaves = [...waiting.values()].filter((m) => !held.has(m.id));
    if (leaves.length === 0) leaves = [...waiting.values()];
    const byQueue = new Map();
    for (const m of leaves) {
      byQueue.set(m.queue, [...(byQueue.get(m.queue) ?? []), m.id]);
      waiting.delete(m.id);
    }
    for (const [q, ids] of byQueue) n += await client.queue(q).bulk("cancel", { ids });
  }
  const header = { name: WORKFLOW_HEADER, value: id };
  for (const q of queues) n += await client.queue(q).bulk("cancel", { filter: { header } });
  return n;
}

// Runs the failed part of workflow `id` again: redrives its dead letters
// in `queues` (the job that died and those cancelled because of it, or by
// cancelWorkflow), parents first → how many. Each waits again for its
// parents not yet completed, so the graph resumes where it failed; those
// completed are not run again.
export async function retryWorkflow(client, id, queues) {
  const dead = new Map();
  for (const q of queues) {
    const filter = { state: "dead", header: { name: WORKFLOW_HEADER, value: id } };
    for await (const m of client.queue(q).iterMessages(filter)) dead.set(m.id, { ...m, queue: q });
  }
  // A redrive links each job again to its parents still in a queue, and
  // cancels it again when one is still dead: a queue's jobs go back once
  // every dead parent they have in another queue has gone back (those in
  // their own queue go back in the same redrive, parents first).
  let n = 0;
  while (dead.size) {
    let progress = false;
    for (const q of queues) {
      const take = new Set([...dead.values()].filter((m) => m.queue === q).map((m) => m.id));
      for (let held = true; held;) {
        held = false;
        for (const i of [...take]) {
          if ((dead.get(i).parents ?? []).some((p) => dead.has(p.id) && !take.has(p.id))) {
            take.delete(i);
            held = true;
          }
        }
      }
      const ids = [...take].sort((a, b) => a - b);
      for (let at = 0; at < ids.length; at += REDRIVE_MAX) {
        n += await client.queue(q).redrive({ ids: ids.slice(at, at + REDRIVE_MAX) });
      }
      for (const i of ids) dead.delete(i);
      progress ||= ids.length > 0;
    }
    if (!progress) break;  // cannot happen: parents are sent first
  }
  return n;
}

// Redrive takes at most this many ids a call.
const REDRIVE_MAX = 10000;
