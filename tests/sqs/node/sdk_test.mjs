// The SQS endpoint of a real `sqlq serve`, driven by the AWS SDK for
// JavaScript v3 (@aws-sdk/client-sqs), which speaks SQS's JSON protocol
// (X-Amz-Target, application/x-amz-json-1.0). The SDK checks the MD5 of
// every body and attribute set it sends and receives. Run by ctest with
// SQLQ_BIN set to the sqlq program; `npm ci` in this directory first.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { createTestDb, dropTestDb } from "../test_db.mjs";

import {
  ChangeMessageVisibilityBatchCommand,
  ChangeMessageVisibilityCommand,
  CreateQueueCommand,
  DeleteMessageBatchCommand,
  DeleteMessageCommand,
  DeleteQueueCommand,
  GetQueueAttributesCommand,
  GetQueueUrlCommand,
  ListDeadLetterSourceQueuesCommand,
  ListMessageMoveTasksCommand,
  ListQueuesCommand,
  ListQueueTagsCommand,
  PurgeQueueCommand,
  ReceiveMessageCommand,
  SendMessageBatchCommand,
  SendMessageCommand,
  SetQueueAttributesCommand,
  SQSClient,
  StartMessageMoveTaskCommand,
  TagQueueCommand,
} from "@aws-sdk/client-sqs";

const SECRET = "nodeSECRETnodeSECRETnodeSECRET0123456789";
const WORKER_SECRET = "nodeWORKERnodeWORKER0123456789";
const METRICS_TOKEN = "node-metrics-reader-0123456789";

let dir, server, port, db;

before(async (t) => {
  dir = mkdtempSync(join(tmpdir(), "sqlq-sqs-node-"));
  db = createTestDb(dir);
  writeFileSync(
    join(dir, "tokens"),
    `aws-key AKIANODEADMIN ${SECRET} admin:*\n` +
      `aws-key AKIANODEWORKER ${WORKER_SECRET} send,claim:work-*\n` +
      `${METRICS_TOKEN} metrics:*\n`,
  );
  const portFile = join(dir, "port");
  server = spawn(
    process.env.SQLQ_BIN,
    ["--db", db, "serve", "--port", "0",
     "--port-file", portFile, "--tokens", join(dir, "tokens")],
    { stdio: ["ignore", "inherit", "inherit"] },
  );
  // The port file appears once the server listens.
  for (let i = 0; i < 1500 && !port; i++) {
    try {
      port = Number(readFileSync(portFile, "utf8").trim()) || 0;
    } catch {}
    if (!port) await sleep(10);
  }
  assert.ok(port, "sqlq serve did not start");
});

after(async () => {
  server.kill("SIGTERM");
  await new Promise((done) => server.once("exit", done));
  dropTestDb(db);
  rmSync(dir, { recursive: true, force: true });
});

function client(key = "AKIANODEADMIN", secret = SECRET) {
  return new SQSClient({
    endpoint: `http://127.0.0.1:${port}`,
    region: "eu-central-1",
    credentials: { accessKeyId: key, secretAccessKey: secret },
    maxAttempts: 1,
  });
}

async function errorOf(promise) {
  try {
    await promise;
  } catch (e) {
    return e;
  }
  assert.fail("the call succeeded");
}

async function parked() {
  const r = await fetch(`http://127.0.0.1:${port}/metrics`, {
    headers: { Authorization: `Bearer ${METRICS_TOKEN}` },
  });
  const m = /^sqlq_server_waiting_consumers (\S+)$/m.exec(await r.text());
  return m ? Number(m[1]) : 0;
}

test("queues: create, find, list, attributes, delete", async () => {
  const sqs = client();
  const { QueueUrl } = await sqs.send(
    new CreateQueueCommand({
      QueueName: "node-jobs",
      Attributes: { VisibilityTimeout: "40" },
    }),
  );
  assert.equal(QueueUrl, `http://127.0.0.1:${port}/000000000000/node-jobs`);
  // Idempotent for equal attributes; QueueNameExists for others.
  await sqs.send(
    new CreateQueueCommand({
      QueueName: "node-jobs",
      Attributes: { VisibilityTimeout: "40" },
    }),
  );
  const taken = await errorOf(
    sqs.send(
      new CreateQueueCommand({
        QueueName: "node-jobs",
        Attributes: { VisibilityTimeout: "41" },
      }),
    ),
  );
  assert.equal(taken.name, "QueueNameExists");
  const bad = await errorOf(
    sqs.send(
      new CreateQueueCommand({
        QueueName: "node-x",
        Attributes: { NoSuchAttribute: "1" },
      }),
    ),
  );
  assert.equal(bad.name, "InvalidAttributeName");
  assert.equal(
    (await sqs.send(new GetQueueUrlCommand({ QueueName: "node-jobs" })))
      .QueueUrl,
    QueueUrl,
  );
  const listed = await sqs.send(
    new ListQueuesCommand({ QueueNamePrefix: "node-" }),
  );
  assert.deepEqual(listed.QueueUrls, [QueueUrl]);
  await sqs.send(
    new SetQueueAttributesCommand({
      QueueUrl,
      Attributes: { VisibilityTimeout: "50" },
    }),
  );
  const attrs = (
    await sqs.send(
      new GetQueueAttributesCommand({ QueueUrl, AttributeNames: ["All"] }),
    )
  ).Attributes;
  assert.equal(attrs.VisibilityTimeout, "50");
  assert.equal(attrs.ApproximateNumberOfMessages, "0");
  assert.match(attrs.QueueArn, /^arn:aws:sqs:eu-central-1:000000000000:node-jobs$/);
  await sqs.send(new DeleteQueueCommand({ QueueUrl }));
  const gone = await errorOf(
    sqs.send(new GetQueueUrlCommand({ QueueName: "node-jobs" })),
  );
  // The SDK's own exception class, and the query protocol's code.
  assert.equal(gone.name, "QueueDoesNotExist");
  assert.equal(gone.Code, "AWS.SimpleQueueService.NonExistentQueue");
  assert.equal(gone.$metadata.httpStatusCode, 400);
});

test("messages: attributes of every type and every character survive", async () => {
  const sqs = client();
  const { QueueUrl } = await sqs.send(
    new CreateQueueCommand({ QueueName: "node-msgs" }),
  );
  const body =
    "tab\there\nline\r\n <xml>&amp;</xml> \"q\" é \ud7ff \ue000 \ufffd 😀 \u{10ffff}";
  const attributes = {
    trace: { DataType: "String", StringValue: "abc" },
    count: { DataType: "Number", StringValue: "42" },
    blob: { DataType: "Binary", BinaryValue: new Uint8Array([0, 1, 2, 254, 255]) },
  };
  const sent = await sqs.send(
    new SendMessageCommand({ QueueUrl, MessageBody: body, MessageAttributes: attributes }),
  );
  const got = await sqs.send(
    new ReceiveMessageCommand({
      QueueUrl,
      MessageAttributeNames: ["All"],
      MessageSystemAttributeNames: ["All"],
      WaitTimeSeconds: 5,
    }),
  );
  assert.equal(got.Messages.length, 1);
  const m = got.Messages[0];
  assert.equal(m.MessageId, sent.MessageId);
  assert.equal(m.Body, body);
  assert.equal(m.MD5OfMessageAttributes, sent.MD5OfMessageAttributes);
  assert.equal(m.MessageAttributes.trace.StringValue, "abc");
  assert.equal(m.MessageAttributes.count.DataType, "Number");
  assert.deepEqual([...m.MessageAttributes.blob.BinaryValue], [0, 1, 2, 254, 255]);
  assert.equal(m.Attributes.ApproximateReceiveCount, "1");
  // Visible again at once; a second receive counts the delivery.
  await sqs.send(
    new ChangeMessageVisibilityCommand({
      QueueUrl,
      ReceiptHandle: m.ReceiptHandle,
      VisibilityTimeout: 0,
    }),
  );
  const again = (
    await sqs.send(
      new ReceiveMessageCommand({
        QueueUrl,
        MessageSystemAttributeNames: ["ApproximateReceiveCount"],
        WaitTimeSeconds: 5,
      }),
    )
  ).Messages[0];
  assert.equal(again.Attributes.ApproximateReceiveCount, "2");
  await sqs.send(new DeleteMessageCommand({ QueueUrl, ReceiptHandle: again.ReceiptHandle }));
  const invalid = await errorOf(
    sqs.send(new DeleteMessageCommand({ QueueUrl, ReceiptHandle: "garbage" })),
  );
  assert.equal(invalid.name, "ReceiptHandleIsInvalid");
  const notInFlight = await errorOf(
    sqs.send(
      new ChangeMessageVisibilityCommand({
        QueueUrl,
        ReceiptHandle: again.ReceiptHandle,
        VisibilityTimeout: 5,
      }),
    ),
  );
  assert.equal(notInFlight.name, "MessageNotInflight");
  const tooLong = await errorOf(
    sqs.send(new SendMessageCommand({ QueueUrl, MessageBody: "a".repeat(262145) })),
  );
  assert.equal(tooLong.Code, "InvalidParameterValue");
  const badChars = await errorOf(
    sqs.send(new SendMessageCommand({ QueueUrl, MessageBody: "nul\u0000" })),
  );
  assert.equal(badChars.name, "InvalidMessageContents");
});

test("batches: per-entry results and the SQS errors", async () => {
  const sqs = client();
  const { QueueUrl } = await sqs.send(
    new CreateQueueCommand({ QueueName: "node-batch" }),
  );
  const r = await sqs.send(
    new SendMessageBatchCommand({
      QueueUrl,
      Entries: [
        { Id: "a", MessageBody: "one" },
        { Id: "b", MessageBody: "\u0001" },
        { Id: "c", MessageBody: "three" },
      ],
    }),
  );
  assert.deepEqual(r.Successful.map((e) => e.Id), ["a", "c"]);
  assert.deepEqual(
    r.Failed.map((e) => [e.Id, e.Code, e.SenderFault]),
    [["b", "InvalidMessageContents", true]],
  );
  const cases = [
    [[{ Id: "x", MessageBody: "1" }, { Id: "x", MessageBody: "2" }], "BatchEntryIdsNotDistinct"],
    [Array.from({ length: 11 }, (_, i) => ({ Id: `e${i}`, MessageBody: "1" })), "TooManyEntriesInBatchRequest"],
    [[{ Id: "bad id", MessageBody: "1" }], "InvalidBatchEntryId"],
    [[], "EmptyBatchRequest"],
  ];
  for (const [Entries, name] of cases) {
    const e = await errorOf(sqs.send(new SendMessageBatchCommand({ QueueUrl, Entries })));
    assert.equal(e.name, name);
  }
  const got = (
    await sqs.send(
      new ReceiveMessageCommand({ QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 5 }),
    )
  ).Messages;
  assert.deepEqual(got.map((m) => m.Body).sort(), ["one", "three"]);
  const vis = await sqs.send(
    new ChangeMessageVisibilityBatchCommand({
      QueueUrl,
      Entries: [
        { Id: "v1", ReceiptHandle: got[0].ReceiptHandle, VisibilityTimeout: 300 },
        { Id: "v2", ReceiptHandle: "junk", VisibilityTimeout: 1 },
      ],
    }),
  );
  assert.deepEqual(vis.Successful.map((e) => e.Id), ["v1"]);
  assert.deepEqual(vis.Failed.map((e) => e.Code), ["ReceiptHandleIsInvalid"]);
  const del = await sqs.send(
    new DeleteMessageBatchCommand({
      QueueUrl,
      Entries: got.map((m, i) => ({ Id: `d${i}`, ReceiptHandle: m.ReceiptHandle })),
    }),
  );
  assert.equal(del.Successful.length, 2);
  await sqs.send(
    new SendMessageBatchCommand({
      QueueUrl,
      Entries: [{ Id: "p", MessageBody: "purged" }],
    }),
  );
  await sqs.send(new PurgeQueueCommand({ QueueUrl }));
  const left = await sqs.send(
    new GetQueueAttributesCommand({
      QueueUrl,
      AttributeNames: ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    }),
  );
  assert.deepEqual(left.Attributes, {
    ApproximateNumberOfMessages: "0",
    ApproximateNumberOfMessagesNotVisible: "0",
  });
});

test("a long poll is woken by a send", async () => {
  const sqs = client();
  const { QueueUrl } = await sqs.send(
    new CreateQueueCommand({ QueueName: "node-wait" }),
  );
  const before = await parked();
  const start = Date.now();
  const waiting = client().send(
    new ReceiveMessageCommand({ QueueUrl, WaitTimeSeconds: 20 }),
  );
  while ((await parked()) <= before) await sleep(10);
  await sqs.send(new SendMessageCommand({ QueueUrl, MessageBody: "wake" }));
  const got = await waiting;
  assert.equal(got.Messages[0].Body, "wake");
  // Woken by the send, long before the 20 s wait ran out.
  assert.ok(Date.now() - start < 10000);
});

test("signatures and grants", async () => {
  const wrong = await errorOf(
    client("AKIANODEADMIN", "not-the-secret").send(new ListQueuesCommand({})),
  );
  assert.equal(wrong.Code, "SignatureDoesNotMatch");
  const unknown = await errorOf(
    client("AKIANOBODY", SECRET).send(new ListQueuesCommand({})),
  );
  assert.equal(unknown.Code, "InvalidClientTokenId");
  const admin = client();
  const work = (await admin.send(new CreateQueueCommand({ QueueName: "work-a" }))).QueueUrl;
  const other = (await admin.send(new CreateQueueCommand({ QueueName: "private-a" }))).QueueUrl;
  const worker = client("AKIANODEWORKER", WORKER_SECRET);
  await worker.send(new SendMessageCommand({ QueueUrl: work, MessageBody: "ok" }));
  const m = (await worker.send(new ReceiveMessageCommand({ QueueUrl: work }))).Messages[0];
  await worker.send(new DeleteMessageCommand({ QueueUrl: work, ReceiptHandle: m.ReceiptHandle }));
  for (const call of [
    () => worker.send(new SendMessageCommand({ QueueUrl: other, MessageBody: "x" })),
    () => worker.send(new PurgeQueueCommand({ QueueUrl: work })),
    () => worker.send(new CreateQueueCommand({ QueueName: "work-b" })),
  ]) {
    const e = await errorOf(call());
    assert.equal(e.Code, "AccessDenied");
    assert.equal(e.$metadata.httpStatusCode, 403);
  }
});

test("dead-letter queues: poison messages move there and back", async () => {
  const sqs = client();
  const dlq = (await sqs.send(new CreateQueueCommand({ QueueName: "node-dlq" })))
    .QueueUrl;
  const arn = (
    await sqs.send(new GetQueueAttributesCommand({ QueueUrl: dlq, AttributeNames: ["QueueArn"] }))
  ).Attributes.QueueArn;
  const src = (
    await sqs.send(
      new CreateQueueCommand({
        QueueName: "node-src",
        Attributes: {
          RedrivePolicy: JSON.stringify({ deadLetterTargetArn: arn, maxReceiveCount: 1 }),
        },
      }),
    )
  ).QueueUrl;
  await sqs.send(new SendMessageCommand({ QueueUrl: src, MessageBody: "poison" }));
  const m = (await sqs.send(new ReceiveMessageCommand({ QueueUrl: src }))).Messages[0];
  await sqs.send(
    new ChangeMessageVisibilityCommand({ QueueUrl: src, ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0 }),
  );
  // Its one receive used: the next receive moves it to the dead-letter queue.
  assert.equal((await sqs.send(new ReceiveMessageCommand({ QueueUrl: src }))).Messages, undefined);
  const sources = await sqs.send(new ListDeadLetterSourceQueuesCommand({ QueueUrl: dlq }));
  assert.deepEqual(sources.queueUrls, [src]);
  const attrs = (
    await sqs.send(new GetQueueAttributesCommand({ QueueUrl: dlq, AttributeNames: ["ApproximateNumberOfMessages"] }))
  ).Attributes;
  assert.equal(attrs.ApproximateNumberOfMessages, "1");
  // A task into its own queue would never end: refused.
  const loop = await errorOf(
    sqs.send(new StartMessageMoveTaskCommand({ SourceArn: arn, DestinationArn: arn })),
  );
  assert.equal(loop.Code, "InvalidParameterValue");
  // Moved back to the source, where it came from.
  const task = await sqs.send(new StartMessageMoveTaskCommand({ SourceArn: arn }));
  assert.ok(task.TaskHandle);
  const tasks = await sqs.send(new ListMessageMoveTasksCommand({ SourceArn: arn }));
  assert.equal(tasks.Results[0].Status, "COMPLETED");
  assert.equal(tasks.Results[0].ApproximateNumberOfMessagesMoved, 1);
  const back = (await sqs.send(new ReceiveMessageCommand({ QueueUrl: src, WaitTimeSeconds: 5 })))
    .Messages[0];
  assert.equal(back.Body, "poison");
  assert.equal((await sqs.send(new ReceiveMessageCommand({ QueueUrl: dlq }))).Messages, undefined);
});

test("FIFO queues and tags over the JSON protocol", async () => {
  const sqs = client();
  const { QueueUrl } = await sqs.send(
    new CreateQueueCommand({
      QueueName: "node-orders.fifo",
      Attributes: { FifoQueue: "true" },
      tags: { team: "orders" },
    }),
  );
  const noDedup = await errorOf(
    sqs.send(new SendMessageCommand({ QueueUrl, MessageBody: "x", MessageGroupId: "g" })),
  );
  assert.equal(noDedup.Code, "InvalidParameterValue");
  const a = await sqs.send(
    new SendMessageCommand({ QueueUrl, MessageBody: "a", MessageGroupId: "g", MessageDeduplicationId: "1" }),
  );
  const dup = await sqs.send(
    new SendMessageCommand({ QueueUrl, MessageBody: "a", MessageGroupId: "g", MessageDeduplicationId: "1" }),
  );
  assert.equal(dup.MessageId, a.MessageId);
  await sqs.send(
    new SendMessageBatchCommand({
      QueueUrl,
      Entries: [{ Id: "b", MessageBody: "b", MessageGroupId: "g", MessageDeduplicationId: "2" }],
    }),
  );
  const got = (
    await sqs.send(
      new ReceiveMessageCommand({ QueueUrl, MaxNumberOfMessages: 10, MessageSystemAttributeNames: ["All"] }),
    )
  ).Messages;
  assert.deepEqual(got.map((m) => m.Body), ["a"]);
  assert.equal(got[0].Attributes.MessageGroupId, "g");
  assert.equal(got[0].Attributes.MessageDeduplicationId, "1");
  assert.equal(got[0].Attributes.SequenceNumber, a.SequenceNumber);
  await sqs.send(new TagQueueCommand({ QueueUrl, Tags: { env: "test" } }));
  const tags = await sqs.send(new ListQueueTagsCommand({ QueueUrl }));
  assert.deepEqual(tags.Tags, { team: "orders", env: "test" });
});
