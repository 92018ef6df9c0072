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
  dead: number;
  archived: number;
  oldestReadyAgeMs: number;
  sends: number;
  claims: number;
  acks: number;
  nacks: number;
  expirations: number;
  deadLettered: number;
  paused: boolean;
}

export interface QueueStatsReply {
  name: string;
  kind: "queue";
  stats: QueueStats;
  options: Omit<QueueInfo, "name" | "kind" | "createdAt" | "paused">;
}

export interface SendOptions {
  priority?: number;
  delayMs?: number;
  runAt?: Date | string;
  dedup?: string;
  group?: string;
  headers?: Headers;
}
export interface OutgoingMessage extends SendOptions {
  payload: Payload;
}
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
  payload: ReceivedPayload;
  headers?: Headers;
  group?: string;
  enqueuedAt: string;
  leaseExpiresAt: string;
  /** In a Worker's handler: aborted when the worker gives the message up
   * (shutdown deadline, lease lost). */
  readonly signal?: AbortSignal;
  ack(): Promise<void>;
  nack(options?: NackOptions): Promise<"retry" | "dead">;
  extend(leaseMs: number): Promise<string>;
}

export type MessageState = "ready" | "delayed" | "leased" | "dead" | "archived";

export interface MessageFilter {
  state?: MessageState | string;
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
  ack(receipt: string): Promise<void>;
  ackMany(receipts: string[]): Promise<Array<{ ok: true } | { ok: false; error: { code: string; message: string } }>>;
  nack(receipt: string, options?: NackOptions): Promise<"retry" | "dead">;
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
  catchUp?: number;
}
export interface ScheduleInfo {
  name: string; cron: string; timeZone: string; queue: string;
  payload: ReceivedPayload; priority: number; headers?: Headers; group?: string;
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

export class Client {
  constructor(url: string, options?: ClientOptions);
  readonly url: string;
  /** Frees the kept-alive connections. */
  close(): void;
  queue(name: string): Queue;
  ring(name: string): Ring;
  rotation(name: string): Rotation;
  schedule(name: string): Schedule;
  queues(): Promise<QueueInfo[]>;
  rings(): Promise<RingInfo[]>;
  rotations(): Promise<RotationInfo[]>;
  schedules(): Promise<ScheduleInfo[]>;
  all(): Promise<Everything>;
  /** GET /v1/overview: counts and rates of everything (keys in camelCase). */
  overview(): Promise<Record<string, any>>;
  health(): Promise<boolean>;
  ready(): Promise<boolean>;
  metrics(): Promise<string>;
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
  /** Handlers running at once [1]. */
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
  /** Kept in the archive as the message's worker, and in its logs [hostname-pid]. */
  name?: string;
  /** Where the worker says what happens [stderr]; null for silence. */
  logger?: Logger | null;
  /** Stop on SIGTERM/SIGINT while run() runs [true]. */
  installSignalHandlers?: boolean;
}

export interface WorkerStats {
  acked: number;
  nacked: number;
  released: number;
  lost: number;
  failedAcks: number;
}

export type Handler = (message: Message) => unknown | Promise<unknown>;

export class Worker {
  constructor(client: Client, queue: string | Queue, handler: Handler, options?: WorkerOptions);
  readonly stats: WorkerStats;
  readonly stopping: boolean;
  /** Runs until stop() or SIGTERM/SIGINT; resolves once every message is
   * acked, nacked or released. */
  run(): Promise<void>;
  /** Stops claiming; resolves when run() is done. */
  stop(): Promise<void>;
}

/** The text a failed handler leaves on its message. */
export function errorText(error: unknown): string;
