// The @a2a-js/sdk echo agents that bench/run.sh measures agentd against.
//
// An A2A 1.0 JSON-RPC server built only from the SDK's own parts:
// DefaultRequestHandler + InMemoryTaskStore + an AgentExecutor that completes
// every task at once with one artifact echoing the message's text, mounted on
// express with the SDK's agentCardHandler and jsonRpcHandler, listening on a
// unix socket path:
//
//     node bench/js/server.mjs /tmp/x.sock            # one event per task
//     node bench/js/server.mjs /tmp/x.sock --events 3 # three events per task
//
// The executor comes in two forms, and the bench runs both, so that agentd is
// set against the SDK at its best:
//   --events 1 (the default): ONE published event, the finished Task
//     (TASK_STATE_COMPLETED, the echo artifact and the history): the lightest
//     echo a user would write with the SDK.
//   --events 3: the task lifecycle spelled out: a submitted Task, an artifact
//     update, a completed status update. The same answer to the client, but
//     the handler processes (and stores) three events per task.
//
// The SDK speaks 1.0 natively: legacyCompat (v0.3) is left off, so the
// handler expects `A2A-Version: 1.0` and answers with 1.0 shapes.
// run.sh copies this file next to the node_modules it installed
// (target/bench/js/), so the bare imports below resolve there.
import { randomUUID } from 'node:crypto';

import express from 'express';
import { TaskState } from '@a2a-js/sdk';
import { AgentEvent, DefaultRequestHandler, InMemoryTaskStore } from '@a2a-js/sdk/server';
import { agentCardHandler, jsonRpcHandler, UserBuilder } from '@a2a-js/sdk/server/express';

const usage = 'usage: node server.mjs SOCKET_PATH [--events 1|3]';
const [socketPath, ...rest] = process.argv.slice(2);
let events = '1';
if (rest.length === 2 && rest[0] === '--events') {
  events = rest[1];
} else if (rest.length !== 0) {
  console.error(usage);
  process.exit(2);
}
if (!socketPath || socketPath.startsWith('-') || !['1', '3'].includes(events)) {
  console.error(usage);
  process.exit(2);
}

const textPart = (text) => ({
  content: { $case: 'text', value: text },
  metadata: undefined,
  filename: '',
  mediaType: 'text/plain',
});

const echoText = (msg) =>
  msg.parts
    .filter((p) => p.content?.$case === 'text')
    .map((p) => p.content.value)
    .join('\n');

const echoArtifact = (text) => ({
  artifactId: randomUUID(),
  name: 'echo',
  description: '',
  parts: [textPart(text)],
  metadata: undefined,
  extensions: [],
});

const cancelTask = async (taskId, bus) => {
  bus.publish(
    AgentEvent.statusUpdate({
      taskId,
      contextId: '',
      status: { state: TaskState.TASK_STATE_CANCELED, message: undefined, timestamp: new Date().toISOString() },
      metadata: undefined,
    }),
  );
};

// One event: the task as it ends. A follow-up message to a known task never
// gets here (the handler refuses one to a terminal task, and every task here
// is terminal at once), but if it did, the stored history already holds it.
class OneEventEcho {
  async execute(ctx, bus) {
    const { taskId, contextId } = ctx;
    const msg = ctx.userMessage;
    bus.publish(
      AgentEvent.task({
        id: taskId,
        contextId,
        status: {
          state: TaskState.TASK_STATE_COMPLETED,
          message: undefined,
          timestamp: new Date().toISOString(),
        },
        artifacts: [echoArtifact(echoText(msg))],
        history: ctx.task ? ctx.task.history : [msg],
        metadata: undefined,
      }),
    );
  }

  cancelTask = cancelTask;
}

// Three events: submitted, the artifact, completed.
class ThreeEventEcho {
  async execute(ctx, bus) {
    const { taskId, contextId } = ctx;
    const msg = ctx.userMessage;
    const text = echoText(msg);
    if (!ctx.task) {
      bus.publish(
        AgentEvent.task({
          id: taskId,
          contextId,
          status: { state: TaskState.TASK_STATE_SUBMITTED, message: undefined, timestamp: undefined },
          artifacts: [],
          history: [msg],
          metadata: undefined,
        }),
      );
    } else {
      bus.publish(AgentEvent.task(ctx.task));
    }
    bus.publish(
      AgentEvent.artifactUpdate({
        taskId,
        contextId,
        artifact: echoArtifact(text),
        append: false,
        lastChunk: true,
        metadata: undefined,
      }),
    );
    bus.publish(
      AgentEvent.statusUpdate({
        taskId,
        contextId,
        status: {
          state: TaskState.TASK_STATE_COMPLETED,
          message: undefined,
          timestamp: new Date().toISOString(),
        },
        metadata: undefined,
      }),
    );
  }

  cancelTask = cancelTask;
}

const card = {
  name: 'js-echo',
  description: '@a2a-js/sdk echo agent: every task answers with the message it was given.',
  supportedInterfaces: [
    // The card must carry a URL; the socket path is what a client dials.
    { url: 'http://localhost/', protocolBinding: 'JSONRPC', tenant: '', protocolVersion: '1.0' },
  ],
  provider: undefined,
  version: '0.1.0',
  capabilities: { streaming: false, pushNotifications: false, extensions: [], extendedAgentCard: false },
  securitySchemes: {},
  securityRequirements: [],
  defaultInputModes: ['text/plain'],
  defaultOutputModes: ['text/plain'],
  skills: [
    {
      id: 'echo',
      name: 'echo',
      description: 'Answers with the text it was sent.',
      tags: ['echo'],
      examples: [],
      inputModes: [],
      outputModes: [],
      securityRequirements: [],
    },
  ],
  signatures: [],
};

const executor = events === '1' ? new OneEventEcho() : new ThreeEventEcho();
const handler = new DefaultRequestHandler(card, new InMemoryTaskStore(), executor);

const app = express();
app.use('/.well-known/agent-card.json', agentCardHandler({ agentCardProvider: handler }));
app.use('/', jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication }));

const server = app.listen(socketPath, () => {
  console.error(`js-echo (${events} event${events === '1' ? '' : 's'} per task) listening on ${socketPath}`);
});
const stop = () => server.close(() => process.exit(0));
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
