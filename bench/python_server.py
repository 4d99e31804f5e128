"""The a2a-sdk (Python) echo agent that bench/run.sh measures agentd against.

An A2A 1.0 JSON-RPC server built only from the SDK's own parts:
DefaultRequestHandler (the SDK's v2 handler) + InMemoryTaskStore + an
AgentExecutor that completes every task at once with one artifact echoing the
message's text, mounted on a Starlette app with the SDK's agent-card and
JSON-RPC routes. run.sh serves it with `uvicorn --uds PATH`:

    uvicorn --app-dir bench python_server:app --uds /tmp/x.sock

(run.sh runs a copy in target/bench/py/, so no __pycache__ lands in bench/.)

a2a-sdk 1.x speaks 1.0 natively: the routes check the `A2A-Version` header
(1.0 accepted; a missing header means 0.3, which is refused unless
enable_v0_3_compat is set, which it is not here) and results are the 1.0
protobuf-JSON shapes (`{"result": {"task": {...}}}`, TASK_STATE_*, ROLE_*).
"""

from starlette.applications import Starlette

from a2a.helpers.proto_helpers import new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
)


class EchoExecutor(AgentExecutor):
    """Completes every task immediately with an artifact echoing the text."""

    async def execute(
        self, context: RequestContext, event_queue: EventQueue
    ) -> None:
        task = context.current_task
        if task is None:
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.add_artifact(
            [new_text_part(context.get_user_input())], name='echo'
        )
        await updater.complete()

    async def cancel(
        self, context: RequestContext, event_queue: EventQueue
    ) -> None:
        task = context.current_task
        if task is not None:
            await TaskUpdater(event_queue, task.id, task.context_id).cancel()


CARD = AgentCard(
    name='python-echo',
    description='a2a-sdk echo agent: every task answers with the message it was given.',
    version='0.1.0',
    supported_interfaces=[
        AgentInterface(
            # The card must carry a URL; the socket path is what a client dials.
            url='http://localhost/',
            protocol_binding='JSONRPC',
            protocol_version='1.0',
        )
    ],
    capabilities=AgentCapabilities(streaming=False, push_notifications=False),
    default_input_modes=['text/plain'],
    default_output_modes=['text/plain'],
    skills=[
        AgentSkill(
            id='echo',
            name='echo',
            description='Answers with the text it was sent.',
            tags=['echo'],
        )
    ],
)

handler = DefaultRequestHandler(
    agent_executor=EchoExecutor(),
    task_store=InMemoryTaskStore(),
    agent_card=CARD,
)

app = Starlette(
    routes=[
        *create_agent_card_routes(CARD),
        *create_jsonrpc_routes(handler, rpc_url='/'),
    ]
)
