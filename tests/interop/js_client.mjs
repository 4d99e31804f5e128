// Drives agentd with the official A2A JavaScript SDK through examples/js/agentd_unix.mjs.
//
// Usage: node js_client.mjs ECHO_SOCKET SLEEP_SOCKET
//
// ECHO_SOCKET is an agentd serving the built-in echo agent; SLEEP_SOCKET one
// serving `--exec 'sleep 30'` (for cancel). Prints one line per check and
// exits non-zero at the first failure, with the reason. Run by
// tests/interop_js.rs, which copies this file and the shim (as
// ./agentd_unix.mjs) into target/interop-js beside the node_modules that
// `npm ci` made from tests/interop/package.json: ES modules resolve bare
// imports (`@a2a-js/sdk`, `undici`) from where the importing file lives.

import { readFileSync } from 'node:fs';
import { randomUUID } from 'node:crypto';

import * as agentdUnix from './agentd_unix.mjs';

import {
  CancelTaskRequest,
  GetTaskRequest,
  ListTasksRequest,
  Role,
  SendMessageRequest,
  SubscribeToTaskRequest,
  TaskState,
  taskStateToJSON,
} from '@a2a-js/sdk';
import { ClientFactory } from '@a2a-js/sdk/client';
import { TaskNotCancelableError, TaskNotFoundError } from '@a2a-js/sdk/errors';

const STATE = taskStateToJSON;
const ORDER = new Map([
  [TaskState.TASK_STATE_SUBMITTED, 0],
  [TaskState.TASK_STATE_WORKING, 1],
  [TaskState.TASK_STATE_COMPLETED, 2],
  [TaskState.TASK_STATE_CANCELED, 2],
]);

class CheckFailed extends Error {}

function check(cond, what) {
  if (!cond) throw new CheckFailed(what);
}

function ok(name, detail) {
  console.log(`ok   ${name}: ${detail}`);
}

/** A SendMessageRequest with one user text part, built from its wire JSON. */
function sendRequest(text, configuration = undefined) {
  return SendMessageRequest.fromJSON({
    message: { messageId: randomUUID(), role: 'ROLE_USER', parts: [{ text }] },
    ...(configuration ? { configuration } : {}),
  });
}

function partsText(parts) {
  return (parts ?? [])
    .filter((p) => p.content?.$case === 'text')
    .map((p) => p.content.value)
    .join('');
}

function kind(event) {
  return event?.payload?.$case ?? '?';
}

function eventState(event) {
  const k = kind(event);
  if (k === 'task' || k === 'statusUpdate') return event.payload.value.status?.state;
  return undefined;
}

function describe(events) {
  return events
    .map((e) => {
      const s = eventState(e);
      return kind(e) + (s !== undefined ? `(${STATE(s)})` : '');
    })
    .join(' → ');
}

async function expectError(promise, errorClass, what) {
  try {
    await promise;
  } catch (e) {
    if (e instanceof errorClass) return e;
    throw new CheckFailed(`${what}: expected ${errorClass.name}, got ${e?.name}: ${e?.message}`);
  }
  throw new CheckFailed(`${what} succeeded`);
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function withTimeout(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new CheckFailed(`${what}: no answer within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

async function run(echoSock, sleepSock, closers) {
  // 1. The card, through the SDK's own resolver over the socket.
  const echoFetch = agentdUnix.unixFetch(echoSock);
  closers.push(echoFetch.close);
  const card = await agentdUnix.fetchCard(echoFetch);
  const first = card.supportedInterfaces?.[0];
  check(first, `card has no supportedInterfaces: ${JSON.stringify(card)}`);
  check(first.protocolBinding === agentdUnix.BINDING_UNIX, `first interface binding is ${first.protocolBinding}`);
  check(first.url === `unix://${echoSock}`, `first interface url is ${first.url}, expected unix://${echoSock}`);
  check(first.protocolVersion === '1.0', `protocolVersion ${first.protocolVersion}`);
  check(card.capabilities?.streaming === true, 'card says streaming: false');
  ok('card', `'${card.name}' v${card.version}, interface ${first.protocolBinding} ${first.url}, streaming`);

  // 2. A stock factory must refuse the card (no JSONRPC/HTTP+JSON interface);
  //    the shim's factory selects the unix interface.
  let stock;
  try {
    await new ClientFactory().createFromAgentCard(card);
  } catch (e) {
    stock = e.message;
  }
  check(stock !== undefined, 'a stock ClientFactory accepted a card with only the unix binding');
  const client = await agentdUnix.clientFactory(echoFetch).createFromAgentCard(card);
  check(
    client.transport.protocolName === 'JSONRPC',
    `shim factory made a ${client.transport.protocolName} transport, expected the SDK's JSONRPC one`
  );
  ok('select', `stock factory refuses (${stock}); shim factory picks ${agentdUnix.BINDING_UNIX}`);

  // 3. Blocking SendMessage to the echo agent.
  let t0 = performance.now();
  const sent = await client.sendMessage(sendRequest('hello from js'));
  check(sent && 'status' in sent && !('messageId' in sent), `blocking send answered ${JSON.stringify(sent)}`);
  check(sent.status.state === TaskState.TASK_STATE_COMPLETED, `blocking send: state ${STATE(sent.status.state)}`);
  const sentTexts = sent.artifacts.map((a) => partsText(a.parts));
  check(
    JSON.stringify(sentTexts) === JSON.stringify(['hello from js']),
    `blocking send: artifacts ${JSON.stringify(sentTexts)}`
  );
  const blockingId = sent.id;
  ok('send', `task ${sent.id} COMPLETED, artifact '${sentTexts[0]}' (${(performance.now() - t0).toFixed(0)} ms)`);

  // 4. SendStreamingMessage.
  const events = [];
  for await (const e of client.sendMessageStream(sendRequest('stream me'))) events.push(e);
  check(events.length > 0 && kind(events[0]) === 'task', `stream does not start with a task: ${describe(events)}`);
  const taskId = events[0].payload.value.id;
  const contextId = events[0].payload.value.contextId;
  const ranks = [];
  const artifacts = [];
  for (const e of events) {
    const k = kind(e);
    if (k === 'statusUpdate' || k === 'artifactUpdate') {
      const v = e.payload.value;
      check(v.taskId === taskId && v.contextId === contextId, `${k} for another task/context: ${JSON.stringify(v)}`);
    }
    if (k === 'artifactUpdate') artifacts.push(partsText(e.payload.value.artifact?.parts));
    const s = eventState(e);
    if (s !== undefined) {
      check(ORDER.has(s), `unexpected state ${STATE(s)} in ${describe(events)}`);
      ranks.push(ORDER.get(s));
    }
  }
  check(
    ranks.every((r, i) => i === 0 || ranks[i - 1] <= r),
    `states out of order: ${describe(events)}`
  );
  const last = events[events.length - 1];
  check(
    kind(last) === 'statusUpdate' && last.payload.value.status?.state === TaskState.TASK_STATE_COMPLETED,
    `stream does not end COMPLETED: ${describe(events)}`
  );
  check(artifacts.join('') === 'stream me', `streamed artifact text ${JSON.stringify(artifacts)}`);
  ok('stream', describe(events));

  // 5. GetTask, and an unknown id.
  const got = await client.getTask(GetTaskRequest.fromJSON({ id: taskId }));
  check(got.id === taskId, `GetTask returned task ${got.id}`);
  check(got.status?.state === TaskState.TASK_STATE_COMPLETED, `GetTask: state ${STATE(got.status?.state)}`);
  const gotTexts = got.artifacts.map((a) => partsText(a.parts));
  check(JSON.stringify(gotTexts) === '["stream me"]', `GetTask: artifacts ${JSON.stringify(gotTexts)}`);
  const userTexts = got.history.filter((m) => m.role === Role.ROLE_USER).map((m) => partsText(m.parts));
  check(userTexts.includes('stream me'), `GetTask: user message missing from history ${JSON.stringify(userTexts)}`);
  ok('get', `task ${taskId} COMPLETED with its artifact and history (${got.history.length} messages)`);

  const notFound = await expectError(
    client.getTask(GetTaskRequest.fromJSON({ id: 'no-such-task' })),
    TaskNotFoundError,
    'GetTask of an unknown id'
  );
  ok('get-unknown', `${notFound.name} (code ${notFound.envelopeCode}: ${notFound.message})`);

  // 6. ListTasks.
  const listed = await client.listTasks(ListTasksRequest.fromJSON({}));
  const ids = listed.tasks.map((t) => t.id);
  check(ids.includes(taskId) && ids.includes(blockingId), `ListTasks lacks our tasks: ${JSON.stringify(ids)}`);
  check(listed.nextPageToken === '', `ListTasks nextPageToken ${JSON.stringify(listed.nextPageToken)}`);
  check(listed.totalSize === ids.length, `ListTasks totalSize ${listed.totalSize} for ${ids.length} tasks`);
  const only = await client.listTasks(ListTasksRequest.fromJSON({ contextId }));
  const onlyIds = only.tasks.map((t) => t.id);
  check(
    JSON.stringify(onlyIds) === JSON.stringify([taskId]),
    `ListTasks by contextId: ${JSON.stringify(onlyIds)}`
  );
  ok('list', `${ids.length} tasks, filter by contextId gives 1`);

  // 7. Cancel a running `sleep 30` task, watched by a SubscribeToTask stream
  //    (on its own connection pool, as a second client would be).
  const sleeper = await agentdUnix.connect(sleepSock);
  closers.push(sleeper.close);
  const watcherConn = await agentdUnix.connect(sleepSock, { card: sleeper.card });
  closers.push(watcherConn.close);
  const c = sleeper.client;

  const pending = await c.sendMessage(sendRequest('zzz', { returnImmediately: true }));
  check(pending && 'status' in pending, `returnImmediately send answered ${JSON.stringify(pending)}`);
  check(
    pending.status.state === TaskState.TASK_STATE_SUBMITTED || pending.status.state === TaskState.TASK_STATE_WORKING,
    `returnImmediately: state ${STATE(pending.status.state)}`
  );
  ok('send-nonblocking', `task ${pending.id} ${STATE(pending.status.state)}`);

  const seen = [];
  let firstEvent;
  const gotFirst = new Promise((resolve) => {
    firstEvent = resolve;
  });
  const watcher = (async () => {
    for await (const e of watcherConn.client.resubscribeTask(SubscribeToTaskRequest.fromJSON({ id: pending.id }))) {
      seen.push(e);
      firstEvent();
    }
  })();
  watcher.catch(() => {}); // awaited below; keep an early failure from being unhandled
  await withTimeout(Promise.race([gotFirst, watcher]), 10_000, 'SubscribeToTask');
  check(kind(seen[0]) === 'task', `SubscribeToTask did not start with a task snapshot: ${describe(seen)}`);

  t0 = performance.now();
  const canceled = await c.cancelTask(CancelTaskRequest.fromJSON({ id: pending.id }));
  let state = canceled.status?.state;
  const deadline = performance.now() + 20_000;
  while (state !== TaskState.TASK_STATE_CANCELED && performance.now() < deadline) {
    await sleep(50);
    state = (await c.getTask(GetTaskRequest.fromJSON({ id: pending.id }))).status?.state;
  }
  check(state === TaskState.TASK_STATE_CANCELED, `after CancelTask the task is ${STATE(state)}`);
  ok(
    'cancel',
    `task ${pending.id} CANCELED (CancelTask answered ${STATE(canceled.status?.state)}, ` +
      `${(performance.now() - t0).toFixed(0)} ms)`
  );

  await withTimeout(watcher, 20_000, 'SubscribeToTask stream end');
  const end = seen[seen.length - 1];
  check(
    kind(end) === 'statusUpdate' && end.payload.value.status?.state === TaskState.TASK_STATE_CANCELED,
    `subscription did not end CANCELED: ${describe(seen)}`
  );
  ok('subscribe', describe(seen));

  const again = await expectError(
    c.cancelTask(CancelTaskRequest.fromJSON({ id: pending.id })),
    TaskNotCancelableError,
    'a second CancelTask of a canceled task'
  );
  ok('cancel-again', `${again.name} (code ${again.envelopeCode}: ${again.message})`);
}

function version(pkg) {
  const url = new URL(`./node_modules/${pkg}/package.json`, import.meta.url);
  return JSON.parse(readFileSync(url, 'utf8')).version;
}

async function main() {
  const args = process.argv.slice(2);
  if (args.length !== 2) {
    console.error('usage: node js_client.mjs ECHO_SOCKET SLEEP_SOCKET');
    return 2;
  }
  console.log(`@a2a-js/sdk ${version('@a2a-js/sdk')}, undici ${version('undici')}, node ${process.version}`);
  const closers = [];
  try {
    await withTimeout(run(args[0], args[1], closers), 90_000, 'the checks');
  } catch (e) {
    if (e instanceof CheckFailed) {
      console.log(`FAIL ${e.message}`);
    } else {
      console.log('FAIL unexpected exception:');
      console.log(e?.stack ?? String(e));
      if (e?.cause) console.log('cause:', e.cause);
    }
    return 1;
  } finally {
    await Promise.allSettled(closers.map((close) => close()));
  }
  console.log('all checks passed');
  return 0;
}

// Exit at once: a failed check may leave a request or stream pending.
process.exit(await main());
