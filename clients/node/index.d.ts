// Types of the sqlq client (hand-written; `npm run typecheck` checks them
// against a program that uses every operation).

/// <reference types="node" />

import type { Agent } from "node:http";

export type Json = string | number | boolean | null | Json[] | { [key: string]: Json };
/** A payload to send: text, any JSON value, or bytes. */
export type Payload = Json | Uint8Array | ArrayBuffer;
/** A payload as received: its text, the JSON value it was sent as, or its bytes. */
export type ReceivedPayload = string | Json | Buffer;
export type Headers = Record<string, string>;

export interface ClientOptions {
  /** Bearer token (server.md, "Authentication"). */
  token?: string;
  /** Bound of one request, beyond a claim's waitMs [30000]. */
  timeoutMs?: number;
  /** Retries of what is safe to send again, at most [20]. */
  retries?: number;
  /** No retry starts later than this after the first try [30000]: outlasts a database failover. */
  retryForMs?: number;
  /** Give every message sent without a dedup key one of its own ("idem:..."), so that a send whose reply was lost is retried and stored once [true]. */
  idempotentSends?: boolean;
  /** CA certificates to trust for https:// URLs. */
  ca?: string | Buffer | Array<string | Buffer>;
  /** An http(s) Agent of your own (default: one kept-alive agent per client). */
  agent?: Agent;
  /** Where the client says that it retries a call [stderr]; null for silence. */
  logger?: Logger | null;
}

export class SqlqError extends Error {
  constructor(code: string, message: string, status?: number,
              options?: { retryAfterMs?: number | null; cause?: unknown });
  /** The server's stable error code ("not_found", ...); branch on it. */
  code: string;
  /** The HTTP status; 0 when no reply came. */
  status: number;
  /** What the server asked to wait (Retry-After), in milliseconds. */
  retryAfterMs: number | null;
}
export class BadRequest extends SqlqError {}
export class Unauthorized extends SqlqError {}
export class Forbidden extends SqlqError {}
export class NotFound extends SqlqError {}
export class AlreadyExists extends SqlqError {}
export class StaleReceipt extends SqlqError {}
export class Conflict extends SqlqError {}
export class TooManyRequests extends SqlqError {}
export class Unavailable extends SqlqError {}
export class ServerTimeout extends SqlqError {}
export class OutcomeUnknown extends SqlqError {}
export class ServerError extends SqlqError {}
export class ConnectionFailed extends SqlqError {
  constructor(message: string, sent: boolean, cause?: unknown);
  /** Whether the request may have reached the server. */
  sent: boolean;
}
/** client.result(): the job became a dead letter (code "job_failed"). */
export class JobFailed extends SqlqError {
  constructor(id: number, error: string | null | undefined, attempts?: number | null,
              info?: ResultInfo);
  /** The job's id. */
  id: number;
  /** Its last error. */
  error: string | null;
  /** How many attempts it had; null when not known. */
  attempts: number | null;
  /** The server's whole reply. */
  info: ResultInfo;
}
/** client.result(): neither completed nor dead within the timeout (code
 * "result_timeout"). */
export class ResultTimeout extends SqlqError {
  constructor(id: number, timeoutMs: number | null, info?: ResultInfo | null, cause?: unknown);
  /** The job's id. */
  id: number;
  /** The server's last reply about the job (its state, progress); null
   * when none came. */
  info: ResultInfo | null;
}

export interface QueueOptions {
  maxAttempts?: number;
  leaseMs?: number;
  backoffBaseMs?: number;
  backoffMaxMs?: number;
  archive?: boolean;
  retentionMs?: number;
  maxPayloadBytes?: number;
  deadRetentionMs?: number;
  uniqueForMs?: number;
  groups?: "none" | "fair" | "ordered";
  maxLeased?: number | null;
  rateLimit?: number | null;
  rateBurst?: number | null;
  groupLimit?: number | null;
  deadLetterQueue?: string | null;
  labels?: Record<string, string>;
}

export interface QueueInfo {
  name: string;
  kind: "queue";
  maxAttempts: number;
  leaseMs: number;
  backoffBaseMs: number;
  backoffMaxMs: number;
  archive: boolean;
  retentionMs: number;
  maxPayloadBytes: number;
  deadRetentionMs: number;
  uniqueForMs: number;
  groups: "none" | "fair" | "ordered";
  maxLeased: number | null;
  rateLimit: number | null;
  rateBurst: number | null;
  groupLimit: number | null;
  deadLetterQueue: string | null;
  labels: Record<string, string>;
  createdAt: string;
  paused: boolean;
}

export interface QueueStats {
  name: string;
  ready: number;
  delayed: number;
  leased: number;
  /** Waiting for messages they depend on. */
  waiting: number;
  dead: number;
  archived: number;
  oldestReadyAgeMs: number;
  sends: number;
  claims: number;
  acks: number;
  nacks: number;
  expirations: number;
  deadLettered: number;
  /** Jobs not started by their expiry (expireAfterMs), dead-lettered or
   * dropped. */
  expired: number;
  paused: boolean;
}

export interface QueueStatsReply {
  name: string;
  kind: "queue";
  stats: QueueStats;
  options: Omit<QueueInfo, "name" | "kind" | "createdAt" | "paused">;
}

export interface SendOptions {
  /** The job's kind: 1..128 ASCII letters, digits and `_ - . : /`
   * ("email.send"); a Worker's `handlers` dispatch on it. "" or none: no kind. */
  kind?: string;
  /** The longest one attempt of the job may run, 1..43,200,000 ms: the
   * server leases it for at most this, and a Worker cuts its handler off
   * there ("timeout after N ms"). None: the worker's or handler's own. */
  timeoutMs?: number;
  /** Dead-lettered ("expired: not started within N ms") unless started
   * within this long after the send, 1 ms..365 d and longer than its delay. */
  expireAfterMs?: number;
  /** What that expiry does: "dead" (dead-letter it, the default) or "drop"
   * (delete it: no dead letter, no archive). "drop" needs expireAfterMs. */
  onExpiry?: "dead" | "drop";
  /** The job's own max attempts, 1..1,000,000: the smaller of it and the
   * queue's maxAttempts applies (1: a dead letter at its first failure). */
  maxAttempts?: number;
  /** The job's own retry backoff, 0 ms..365 d, in place of the queue's
   * backoffBaseMs and backoffMaxMs: the delay's base after a failed attempt,
   * and its cap (at least backoffMs; none: the queue's cap). */
  backoffMs?: number;
  backoffMaxMs?: number;
  priority?: number;
  delayMs?: number;
  runAt?: Date | string;
  dedup?: string;
  group?: string;
  headers?: Headers;
  /** Ids of messages (in any queue) it waits for: "waiting" until every
   * one has completed (docs/semantics.md, "Dependencies"). */
  dependsOn?: number[];
  /** What it does when one it waits for dies instead: cancelled too
   * ("cancel", the default), runs anyway ("run"), or waits for a redrive
   * ("wait"). */
  ifDependencyDies?: "cancel" | "run" | "wait";
}
export interface OutgoingMessage extends SendOptions {
  payload: Payload;
  /** In a batch: indexes of earlier messages of the same batch it waits for. */
  dependsOnBatch?: number[];
}
/** A message of client.sendAll(): a send's fields and the queue it goes to. */
export interface QueuedMessage extends OutgoingMessage {
  queue: string;
}
/** A job of a workflow: its queue, payload and a send's options. */
export interface Job extends SendOptions {
  queue: string;
  payload: Payload;
}
/** A parent of a workflow's job: one of its jobs, or a message sent
 * before (an id; or {queue, id}, whose result the job can read). */
export type Parent = Step | number | { queue: string; id: number };

/** A job added to a workflow: its id is sent.ids[index]. */
export class Step {
  readonly workflow: Workflow;
  readonly index: number;
  readonly job: Job;
}

/** A graph of jobs sent in one transaction (POST /v1/messages); each job
 * is added after its parents, so it never has a cycle. */
export class Workflow {
  /** Its id, in the header sqlq-workflow of every job it sends. */
  readonly id: string;
  readonly steps: Step[];
  readonly length: number;
  /** The queues of its jobs, each once. */
  queues(): string[];
  /** findWorkflow(client, this.id, this.queues()). */
  find(client: Client): Promise<(MessageInfo & { queue: string })[]>;
  /** cancelWorkflow(client, this.id, this.queues()). */
  cancel(client: Client): Promise<number>;
  /** retryWorkflow(client, this.id, this.queues()). */
  retry(client: Client): Promise<number>;
  /** Adds job, to run once every parent in after has completed. */
  add(job: Job, options?: { after?: Parent[] }): Step;
  /** The messages of POST /v1/messages (client.sendAll). */
  messages(): QueuedMessage[];
  /** Sends every job in one transaction: all are stored, or none; ids in
   * the order the jobs were added. */
  send(client: Client): Promise<SendResult>;
}
/** Each item runs once the one before it has completed (a workflow: all
 * its last jobs). */
export function chain(...items: (Job | Workflow)[]): Workflow;
/** The items side by side, none waiting for another. */
export function group(...items: (Job | Workflow)[]): Workflow;
/** The jobs of workflow id still in queues (not those completed or dead). */
export function findWorkflow(client: Client, id: string, queues: string[]): Promise<(MessageInfo & { queue: string })[]>;
/** Cancels every job of workflow id still in queues (the waiting ones
 * first); how many. */
export function cancelWorkflow(client: Client, id: string, queues: string[]): Promise<number>;
/** Redrives the dead jobs of workflow id in queues, parents first: each
 * waits again for its parents not yet completed; how many. */
export function retryWorkflow(client: Client, id: string, queues: string[]): Promise<number>;
/** callback runs once every member has completed. */
export function chord(members: Workflow | (Job | Workflow)[], callback: Job | Workflow): Workflow;
export interface SendResult {
  ids: number[];
  duplicate: boolean[];
}

export interface ClaimOptions {
  max?: number;
  leaseMs?: number;
  waitMs?: number;
  worker?: string;
  /** A receipt to ack in the claim's transaction. */
  ack?: string;
  /** Ends a waiting claim early. Once the request went out the claim is
   * still answered, with the messages the server took for it, if any
   * (the caller's to work or give back); before that, it fails with the
   * code "aborted". */
  signal?: AbortSignal;
}
export interface ClaimResult extends Array<Message> {
  limitedBy?: "rate_limit" | "max_leased" | "group_limit" | string;
  retryAfterMs?: number;
  limited?: boolean;
  /** The queue is paused: nothing is handed out until it is resumed. */
  paused?: boolean;
  /** Nothing came while messages were ready: their groups held them back
   * (an earlier message of the group in flight or waiting for its retry,
   * or the group at its group_limit). */
  groupsBusy?: boolean;
}

export interface NackOptions {
  error?: string;
  delayMs?: number;
  /** "retry" (default): a failed attempt, retried after delayMs or the
   * queue's backoff; "dead": a dead letter now; "snooze": back after
   * delayMs without counting the attempt. */
  action?: "retry" | "dead" | "snooze";
}
/** What the server did with a nack: retried later, dead-lettered, snoozed. */
export type NackOutcome = "retry" | "dead" | "snoozed";

export interface AckOptions {
  /** The job's result, any JSON value (null too; undefined: none), as
   * large as the queue's maxPayloadBytes; kept for client.result(). */
  result?: unknown;
  /** How long the result is kept, 1000 ms..30 days [the server's: a day]. */
  resultTtlMs?: number | null;
}

/** What the server has of a job (client.result, queue.resultInfo). */
export interface ResultInfo {
  id: number;
  state: "ready" | "delayed" | "leased" | "completed" | "dead";
  /** Completed with a result: what its handler returned (or the ack carried). */
  result?: Json;
  /** Completed: when (RFC 3339). */
  completedAt?: string;
  /** The latest progress its handler recorded, with its note and time. */
  progress?: number;
  note?: Json;
  progressAt?: string;
  /** Dead: its last error. */
  error?: string;
  attempts?: number;
}

export interface ResultOptions {
  /** Give up (ResultTimeout) after this long [60000]; null: no limit. */
  timeoutMs?: number | null;
  /** Aborts the wait. */
  signal?: AbortSignal;
}

export interface ErrorEntry {
  attempt: number;
  at: string;
  error: string;
}

/** A claimed message, with ack/nack/extend through its receipt. */
export class Message {
  readonly queue: Queue;
  /** The message as the server sent it. */
  readonly raw: Record<string, unknown>;
  id: number;
  receipt: string;
  attempt: number;
  priority: number;
  /** The job's kind; undefined when it was sent without one. */
  kind?: string;
  payload: ReceivedPayload;
  headers?: Headers;
  group?: string;
  /** The job's own time limit (timeoutMs at its send); undefined when none. */
  timeoutMs?: number;
  /** When the job would have expired unstarted (expireAfterMs at its send);
   * undefined when it has no such limit. */
  expiresAt?: string;
  /** "drop" when its expiry deletes it (onExpiry at its send); undefined
   * when it is dead-lettered. */
  onExpiry?: "drop";
  /** The job's own max attempts (maxAttempts at its send); undefined when
   * none (the queue's applies). */
  maxAttempts?: number;
  /** A member or the callback of a batch (client.createBatch). */
  batch?: BatchRef;
  enqueuedAt: string;
  leaseExpiresAt: string;
  /** In a Worker's handler: aborted when the worker gives the message up
   * (its timeout, shutdown deadline, lease lost); the handler's
   * `context.signal`. */
  readonly signal?: AbortSignal;
  /** Acks; with `result`, the job's result is kept for client.result(). */
  ack(options?: AckOptions): Promise<void>;
  /** Records how far the job has come (a finite number) with an optional
   * note (any JSON value, at most 4 KiB); the latest replaces the one
   * before. It does not extend the lease. */
  progress(value: number, note?: unknown): Promise<void>;
  nack(options?: NackOptions & { action?: "retry" | "dead" }): Promise<"retry" | "dead">;
  /** A snooze: "snoozed", or "retry"/"dead" once the message was snoozed 100 times. */
  nack(options: NackOptions & { action: "snooze" }): Promise<NackOutcome>;
  extend(leaseMs: number): Promise<string>;
  /** The messages it was sent to wait for (dependsOn, dependsOnBatch,
   * a workflow's parents), completed or not; queue "" for one that had
   * left every queue before the send. [] without dependencies. */
  readonly parents: { queue: string; id: number }[];
  /** The results of its parents, one request each: id → result, in the
   * parents' order; a parent acked without a result (or whose result ran
   * out) is left out. */
  parentResults(): Promise<Map<number, unknown>>;
}

export type MessageState = "ready" | "delayed" | "leased" | "waiting" | "dead" | "archived";

export interface MessageFilter {
  state?: MessageState | string;
  /** Only the messages of this kind. */
  kind?: string;
  minPriority?: number;
  maxPriority?: number;
  dedup?: string;
  group?: string;
  header?: { name: string; value: string } | string;
  payloadPrefix?: string;
  enqueuedAfter?: Date | string;
  enqueuedBefore?: Date | string;
}

export interface MessageInfo {
  id: number;
  state: MessageState;
  priority: number;
  attempts: number;
  kind?: string;
  /** Its own limits, set at its send (absent when none): the longest one
   * attempt may run; how long after the send it must start, and when that is. */
  timeoutMs?: number;
  expireAfterMs?: number;
  expiresAt?: string;
  /** "drop" when its expiry deletes it rather than dead-letters it. */
  onExpiry?: "drop";
  /** Its own retry policy, set at its send (absent when none). */
  maxAttempts?: number;
  backoffMs?: number;
  backoffMaxMs?: number;
  /** How many times a handler snoozed it (absent when none). */
  snoozes?: number;
  payload: ReceivedPayload;
  headers?: Headers;
  dedup?: string;
  group?: string;
  enqueuedAt: string;
  readyAt?: string;
  leaseExpiresAt?: string;
  worker?: string;
  lastError?: string;
  errors?: ErrorEntry[];
  diedAt?: string;
  completedAt?: string;
  /** While "waiting": the ids it still waits for, and of those the dead
   * ones it waits for a redrive of. */
  waitsFor?: number[];
  waitsForDead?: number[];
}

export interface MessagePage {
  messages: MessageInfo[];
  nextCursor: string | null;
}

export interface BulkSelection {
  ids?: number[];
  /** Where the ids are: "dead" or "archived"; the queue by default. */
  state?: "dead" | "archived";
  filter?: MessageFilter & { header?: { name: string; value: string } };
  runAt?: Date | string;
  priority?: number;
}

export interface DeadLetter {
  id: number;
  priority: number;
  attempts: number;
  lastError: string;
  kind?: string;
  payload: ReceivedPayload;
  headers?: Headers;
  errors?: ErrorEntry[];
  enqueuedAt: string;
  diedAt: string;
}

export interface ArchivedMessage {
  id: number;
  priority: number;
  attempts: number;
  worker?: string;
  kind?: string;
  payload: ReceivedPayload;
  headers?: Headers;
  errors?: ErrorEntry[];
  enqueuedAt: string;
  completedAt: string;
}

export interface History {
  stepS: number;
  points: Array<{
    at: string; ready: number; delayed: number; leased: number; dead: number;
    rates: { sends: number; claims: number; acks: number; deadLettered: number };
  }>;
}

export class Queue {
  constructor(client: Client, name: string);
  readonly client: Client;
  readonly name: string;
  create(options?: QueueOptions): Promise<QueueInfo>;
  stats(): Promise<QueueStatsReply>;
  change(options: QueueOptions): Promise<QueueInfo>;
  pause(): Promise<QueueInfo>;
  resume(): Promise<QueueInfo>;
  drop(): Promise<void>;
  purge(): Promise<number>;
  history(): Promise<History>;
  send(payload: Payload, options?: SendOptions): Promise<number>;
  sendBatch(messages: OutgoingMessage[]): Promise<SendResult>;
  claim(options?: ClaimOptions): Promise<ClaimResult>;
  ack(receipt: string, options?: AckOptions): Promise<void>;
  progress(receipt: string, progress: number, note?: unknown): Promise<void>;
  /** One request: what the server has of the job now (held up to waitMs
   * until it is completed or dead). */
  resultInfo(id: number, options?: { waitMs?: number }): Promise<ResultInfo>;
  /** client.result(queue, id, options) of this queue. */
  result(id: number, options?: ResultOptions): Promise<ResultInfo>;
  ackMany(receipts: string[]): Promise<Array<{ ok: true } | { ok: false; error: { code: string; message: string } }>>;
  nack(receipt: string, options?: NackOptions & { action?: "retry" | "dead" }): Promise<"retry" | "dead">;
  nack(receipt: string, options: NackOptions & { action: "snooze" }): Promise<NackOutcome>;
  extend(receipt: string, leaseMs: number): Promise<string>;
  message(id: number): Promise<MessageInfo>;
  messages(filter?: MessageFilter & { limit?: number; cursor?: string }): Promise<MessagePage>;
  iterMessages(filter?: MessageFilter & { limit?: number }): AsyncGenerator<MessageInfo, void, undefined>;
  count(filter?: MessageFilter): Promise<number>;
  deleteMessage(id: number): Promise<number>;
  retryMessage(id: number): Promise<number>;
  cancelMessage(id: number): Promise<number>;
  rescheduleMessage(id: number, runAt: Date | string): Promise<number>;
  setPriority(id: number, priority: number): Promise<number>;
  bulk(action: "delete" | "cancel" | "retry" | "reschedule" | "priority",
       selection: BulkSelection): Promise<number>;
  dead(options?: { limit?: number; afterId?: number }): Promise<DeadLetter[]>;
  redrive(which: { ids: number[] } | { all: true }): Promise<number>;
  purgeDead(): Promise<number>;
  archive(options?: { limit?: number; afterId?: number }): Promise<ArchivedMessage[]>;
}

export interface RingInfo { name: string; kind: "ring"; capacity: number; maxPayloadBytes: number }
export interface RingStats { name: string; capacity: number; groups: number; entries: number; pushes: number }
export interface RingEntry { seq: number; group: string; payload: ReceivedPayload; pushedAt: string }

export class Ring {
  constructor(client: Client, name: string);
  readonly name: string;
  create(options?: { capacity?: number; maxPayloadBytes?: number }): Promise<RingInfo>;
  stats(): Promise<RingStats>;
  drop(): Promise<void>;
  push(group: string, payload: Payload): Promise<RingEntry>;
  read(group: string, options?: { limit?: number; order?: "newest" | "oldest"; afterSeq?: number }): Promise<RingEntry[]>;
  groups(): Promise<Array<{ group: string; entries: number }>>;
  deleteGroup(group: string): Promise<number>;
  deleteEntry(group: string, seq: number): Promise<number>;
}

export interface TopicInfo { name: string; kind: "topic"; createdAt: string; subscriptions: number }
export interface Subscription { topic: string; queue: string; filter: Record<string, string>; subscribedAt: string }
export interface Delivery { queue: string; message: number; id: number; duplicate: boolean }

export class Topic {
  constructor(client: Client, name: string);
  readonly name: string;
  create(): Promise<{ name: string; kind: "topic" }>;
  drop(): Promise<void>;
  subscribe(queue: string, options?: { filter?: Record<string, string> }): Promise<Subscription & { created: boolean }>;
  unsubscribe(queue: string): Promise<void>;
  subscriptions(): Promise<Subscription[]>;
  publish(payload: Payload, options?: SendOptions): Promise<Delivery[]>;
  publishBatch(messages: OutgoingMessage[]): Promise<Delivery[]>;
}

export interface RotationInfo { name: string; kind: "rotation"; maxFailures: number; maxPayloadBytes: number }
export interface RotationStats { name: string; maxFailures: number; items: number; parked: number; serves: number }
export interface RotationItem { key: string; payload: ReceivedPayload; served: number; failures: number; parked: boolean }

export class Rotation {
  constructor(client: Client, name: string);
  readonly name: string;
  create(options?: { maxFailures?: number; maxPayloadBytes?: number }): Promise<RotationInfo>;
  stats(): Promise<RotationStats>;
  drop(): Promise<void>;
  add(key: string, payload: Payload): Promise<void>;
  items(): Promise<RotationItem[]>;
  remove(key: string): Promise<void>;
  next(n?: number): Promise<RotationItem[]>;
  fail(key: string): Promise<RotationItem>;
  ok(key: string): Promise<RotationItem>;
  reset(key: string): Promise<RotationItem>;
}

export interface ScheduleOptions {
  cron: string;
  queue: string;
  timeZone?: string;
  payload?: Payload;
  priority?: number;
  headers?: Headers;
  group?: string;
  /** The kind of each message it sends. */
  kind?: string;
  /** The limits of each message it sends, as in a send. */
  timeoutMs?: number;
  expireAfterMs?: number;
  onExpiry?: "dead" | "drop";
  catchUp?: number;
}
export interface ScheduleInfo {
  name: string; cron: string; timeZone: string; queue: string;
  payload: ReceivedPayload; priority: number; headers?: Headers; group?: string; kind?: string;
  timeoutMs?: number; expireAfterMs?: number; onExpiry?: "drop";
  catchUp: number; paused: boolean; nextTick: string | null; lastTick: string | null;
  sent: number; skipped: number; lastError: string; createdAt: string;
}

export class Schedule {
  constructor(client: Client, name: string);
  readonly name: string;
  create(options: ScheduleOptions): Promise<ScheduleInfo>;
  get(): Promise<ScheduleInfo>;
  pause(): Promise<ScheduleInfo>;
  resume(): Promise<ScheduleInfo>;
  drop(): Promise<void>;
}

export interface Everything {
  queues: QueueInfo[];
  rings: RingInfo[];
  rotations: RotationInfo[];
}

/** What client.createBatch() stored. */
export interface BatchSent {
  id: string;
  members: number[];
  callbackId: number;
}
/** A batch's counts and state (client.batch()). */
export interface BatchStatus {
  id: string;
  total: number;
  completed: number;
  dead: number;
  cancelled: number;
  pending: number;
  done: boolean;
  callbackQueue: string;
  callbackId: number;
  queues: string[];
  createdAt: string;
  doneAt?: string;
  cancelledAt?: string;
  expiresAt?: string;
}
/** A message's part in a batch: a member's {id}; the callback's {id,
 * callback: true} and, once the batch is done, the counts. */
export interface BatchRef {
  id: string;
  callback?: true;
  total?: number;
  completed?: number;
  dead?: number;
  cancelled?: number;
}

export class Client {
  constructor(url: string, options?: ClientOptions);
  readonly url: string;
  /** Frees the kept-alive connections. */
  close(): void;
  queue(name: string): Queue;
  /** POST /v1/messages: to several queues in one transaction, all or none
   * (a missing queue stores nothing); dependsOnBatch indexes count over the
   * whole list. */
  sendAll(messages: QueuedMessage[]): Promise<SendResult>;
  /** workflow.send(client). */
  sendFlow(flow: Workflow): Promise<SendResult>;
  /** POST /v1/batches: the members and the callback in one transaction; the
   * callback is ready, once, when every member has completed or died. */
  createBatch(members: QueuedMessage[], callback: QueuedMessage,
              options?: { id?: string; retentionMs?: number }): Promise<BatchSent>;
  /** GET /v1/batches/{id}: the batch as it stands. */
  batch(id: string): Promise<BatchStatus>;
  /** POST /v1/batches/{id}/cancel: cancels the members not ended yet. */
  cancelBatch(id: string): Promise<BatchStatus>;
  ring(name: string): Ring;
  rotation(name: string): Rotation;
  topic(name: string): Topic;
  schedule(name: string): Schedule;
  queues(): Promise<QueueInfo[]>;
  rings(): Promise<RingInfo[]>;
  topics(): Promise<TopicInfo[]>;
  rotations(): Promise<RotationInfo[]>;
  schedules(): Promise<ScheduleInfo[]>;
  all(): Promise<Everything>;
  /** GET /v1/overview: counts and rates of everything (keys in camelCase). */
  overview(): Promise<Record<string, any>>;
  health(): Promise<boolean>;
  ready(): Promise<boolean>;
  metrics(): Promise<string>;
  /** The live workers (each Worker reports itself while it runs), of one
   * queue or of every queue the token may see. */
  workers(options?: { queue?: string }): Promise<LiveWorker[]>;
  /** A worker's report (a Worker sends its own). */
  reportWorker(id: string, report: WorkerReport): Promise<{ id: string; ttlMs: number }>;
  removeWorker(id: string): Promise<number>;
  /** Awaits the result of a job: resolves once it is completed; rejects with
   * JobFailed when it became a dead letter, ResultTimeout after timeoutMs,
   * NotFound when the queue knows nothing of it. Survives a server restart
   * (asks again until the timeout). */
  result(queue: string | Queue, id: number, options?: ResultOptions): Promise<ResultInfo>;
}

export interface WorkerReport {
  name?: string;
  host?: string;
  pid?: number;
  queues?: string[];
  kinds?: string[];
  concurrency?: number;
  /** The jobs in its hands. */
  jobs?: Array<{ queue: string; id: number; since: string }>;
  startedAt?: string;
  /** How long the report lasts [30000]. */
  ttlMs?: number;
}
export interface LiveWorker extends Required<Omit<WorkerReport, "startedAt">> {
  id: string;
  startedAt?: string;
  lastSeen: string;
  expiresAt: string;
}

/** `console`, or any object with these methods (winston's loggers have
 * them). `fields` holds the event's values; a failed handler's error is
 * `fields.error`. */
export interface Logger {
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}

export interface WorkerOptions {
  /** Handlers running at once, over all the worker's queues [1]. */
  concurrency?: number;
  /** Long poll of each claim [20000]. */
  waitMs?: number;
  /** Lease of each claim [the queue's]. */
  leaseMs?: number | null;
  /** Extend a running message's lease at this fraction of it [1/3]. */
  extendEvery?: number;
  /** After stop(): how long running handlers may still finish [30000]. */
  shutdownTimeoutMs?: number;
  /** Cap of the reconnection backoff [5000]. */
  maxBackoffMs?: number;
  /** In its logs and its reports [hostname-pid]. */
  name?: string;
  /** Where the worker says what happens [stderr]; null for silence. */
  logger?: Logger | null;
  /** Stop on SIGTERM/SIGINT while run() runs [true]. */
  installSignalHandlers?: boolean;
  /** Every handler's time limit, unless its own says otherwise [none]: at
   * the limit its signal is aborted, its lease no longer extended, and the
   * attempt fails with "timeout after N ms". A message sent with a shorter
   * timeoutMs of its own is cut off at that one. */
  timeoutMs?: number | null;
  /** A message no handler takes: "fail" (a failed attempt with the error
   * "no handler for kind 'x'": retried, then a dead letter), "snooze" (back
   * after unknownKindDelayMs, the attempt not counted), "dead" (a dead
   * letter now) ["fail"]. */
  unknownKind?: "fail" | "snooze" | "dead";
  /** The snooze of unknownKind "snooze" [30000]. */
  unknownKindDelayMs?: number;
  /** Report itself among the live workers while it runs [true]. A refused
   * report is tried again at the next report's time (logged on the first
   * and every tenth try); only a server without live workers ends them. */
  report?: boolean;
  /** How long each report lasts; it reports again every third of it [30000]. */
  reportTtlMs?: number;
  /** How long the server keeps a handler's result [its default: a day]. */
  resultTtlMs?: number | null;
}

/** A worker's options with its queues and handlers. */
export interface JobWorkerOptions extends WorkerOptions {
  /** The queues to claim from, one claim loop each, sharing `concurrency`. */
  queues?: Array<string | Queue>;
  queue?: string | Queue;
  /** The handler of each kind; "*" takes the kinds not listed and the
   * messages without a kind. */
  handlers?: Handlers;
  /** The handler of every message (the same as handlers["*"]). */
  handler?: Handler;
}

export interface WorkerCounts {
  acked: number;
  /** Every nack: failed attempts, snoozes, dead letters of the handler's. */
  nacked: number;
  /** Of the nacks: the snoozes (Snooze, unknownKind "snooze"). */
  snoozed: number;
  /** Of the nacks: dead-lettered by the handler (Permanent, Cancel, unknownKind "dead"). */
  dead: number;
  released: number;
  lost: number;
  failedAcks: number;
}
export interface WorkerStats extends WorkerCounts {
  /** The same counts for each queue of the worker. */
  queues: Record<string, WorkerCounts>;
}

export interface HandlerContext {
  /** Aborted when the worker gives the message up: its timeout, a lost
   * lease, the shutdown deadline. */
  signal: AbortSignal;
}
/** Returns (or resolves): acked; what it returns, unless undefined, is kept
 * as the job's result (any JSON value, as large as the queue's
 * maxPayloadBytes; else the attempt fails with the reason). Throws Snooze, RetryAfter, Permanent or
 * Cancel for those outcomes; any other throw is a failed attempt. */
export type Handler = (message: Message, context: HandlerContext) => unknown | Promise<unknown>;
export type Handlers = Record<string, Handler | { handler: Handler; timeoutMs?: number | null }>;

export class Worker {
  constructor(client: Client, queue: string | Queue | Array<string | Queue>, handler: Handler,
              options?: WorkerOptions);
  constructor(client: Client, queue: string | Queue | Array<string | Queue>,
              options: JobWorkerOptions);
  constructor(client: Client, options: JobWorkerOptions);
  readonly stats: WorkerStats;
  readonly stopping: boolean;
  /** The names of the queues it claims from. */
  readonly queues: string[];
  /** Unique per process and run (host:pid:random): the id of its reports,
   * and the `worker` of its claims (of a leased or archived message). */
  readonly id: string;
  /** Runs until stop() or SIGTERM/SIGINT; resolves once every message is
   * acked, nacked or released. */
  run(): Promise<void>;
  /** Stops claiming; resolves when run() is done. */
  stop(): Promise<void>;
  /** Hooks around every handler, in the order added; returns the worker. */
  use(hooks: WorkerHooks): this;
  /** For tests: claims every ready message of the worker's queues (or of
   * `queue`) and runs each once through the handlers, one at a time,
   * without the worker's loop. */
  drainInline(options?: { queue?: string | Queue }): Promise<InlineResult[]>;
}

export interface WorkerHooks {
  /** Before the handler; a throw is the handler's. */
  before?(message: Message, context: HandlerContext & { queue: string }): unknown;
  /** After the handler resolved, with what it resolved to; a throw is the handler's. */
  after?(message: Message, result: unknown, context: HandlerContext & { queue: string }): unknown;
  /** When the handler, a before or an after threw; throw another error
   * (a Permanent, say) to settle the message by that one instead. */
  onError?(message: Message, error: unknown, context: HandlerContext & { queue: string }): unknown;
}

export interface InlineResult {
  message: Message;
  queue: string;
  /** What became of it; null when the server refused the outcome. */
  outcome: "acked" | NackOutcome | null;
  /** The error the message keeps, for a nack. */
  error?: string;
  /** What the handler returned, acked as the job's result (undefined: none). */
  result?: unknown;
}

/** Thrown by a handler: the message comes back after delayMs, the attempt
 * not counted (a message snoozed 100 times has its further snoozes counted
 * as failed attempts). */
export class Snooze extends Error {
  constructor(delayMs?: number);
  readonly delayMs: number;
}
/** Thrown by a handler: a failed attempt (with `error` as its error),
 * retried after delayMs instead of the queue's backoff. */
export class RetryAfter extends Error {
  constructor(delayMs: number, error?: unknown);
  readonly delayMs: number;
  readonly error: unknown;
}
/** Thrown by a handler: a dead letter now, `error` its last error. */
export class Permanent extends Error {
  constructor(error?: unknown);
  readonly error: unknown;
}
/** Thrown by a handler: a dead letter now, with the error "cancelled: REASON". */
export class Cancel extends Error {
  constructor(reason?: string);
  readonly reason: string;
}

/** The text a failed handler leaves on its message. */
export function errorText(error: unknown): string;
