// The @a2a-js/sdk echo agent that bench/run.sh measures agentd against.
//
// An A2A 1.0 JSON-RPC server built only from the SDK's own parts:
// DefaultRequestHandler + InMemoryTaskStore + an AgentExecutor that completes
// every task at once with one artifact echoing the message's text, mounted on
// express with the SDK's agentCardHandler and jsonRpcHandler, listening on a
// unix socket path:
//
//     node bench/js/server.mjs /tmp/x.sock
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

const socketPath = process.argv[2];
if (!socketPath) {
  console.error('usage: node server.mjs SOCKET_PATH');
  process.exit(2);
}

const textPart = (text) => ({
  content: { $case: 'text', value: text },
  metadata: undefined,
  filename: '',
  mediaType: 'text/plain',
});

class EchoExecutor {
  async execute(ctx, bus) {
    const { taskId, contextId } = ctx;
    const msg = ctx.userMessage;
    const text = msg.parts
      .filter((p) => p.content?.$case === 'text')
      .map((p) => p.content.value)
      .join('\n');
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
        artifact: {
          artifactId: randomUUID(),
          name: 'echo',
          description: '',
          parts: [textPart(text)],
          metadata: undefined,
          extensions: [],
        },
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

  cancelTask = async (taskId, bus) => {
    bus.publish(
      AgentEvent.statusUpdate({
        taskId,
        contextId: '',
        status: { state: TaskState.TASK_STATE_CANCELED, message: undefined, timestamp: new Date().toISOString() },
        metadata: undefined,
      }),
    );
  };
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

const handler = new DefaultRequestHandler(card, new InMemoryTaskStore(), new EchoExecutor());

const app = express();
app.use('/.well-known/agent-card.json', agentCardHandler({ agentCardProvider: handler }));
app.use('/', jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication }));

const server = app.listen(socketPath, () => {
  console.error(`js-echo listening on ${socketPath}`);
});
const stop = () => server.close(() => process.exit(0));
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
