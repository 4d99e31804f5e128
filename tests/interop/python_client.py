"""Drives agentd with the official A2A Python SDK through examples/python/agentd_unix.py.

Usage: python_client.py ECHO_SOCKET SLEEP_SOCKET

ECHO_SOCKET is an agentd serving the built-in echo agent; SLEEP_SOCKET one
serving `--exec 'sleep 30'` (for cancel). Prints one line per check and exits
non-zero at the first failure, with the reason. Run by tests/interop_python.rs.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'examples', 'python'))

import agentd_unix  # noqa: E402

from a2a.client import ClientFactory  # noqa: E402
from a2a.helpers import get_artifact_text, new_text_message  # noqa: E402
from a2a.types import (  # noqa: E402
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import TaskNotCancelableError, TaskNotFoundError  # noqa: E402

STATE = TaskState.Name
ORDER = {
    TaskState.TASK_STATE_SUBMITTED: 0,
    TaskState.TASK_STATE_WORKING: 1,
    TaskState.TASK_STATE_COMPLETED: 2,
    TaskState.TASK_STATE_CANCELED: 2,
}


class CheckFailed(Exception):
    pass


def check(cond: bool, what: str) -> None:
    if not cond:
        raise CheckFailed(what)


def ok(name: str, detail: str) -> None:
    print(f'ok   {name}: {detail}', flush=True)


def user_message(text: str):
    return new_text_message(text, role=Role.ROLE_USER)


def kind(event: StreamResponse) -> str:
    return event.WhichOneof('payload') or '?'


def event_state(event: StreamResponse):
    k = kind(event)
    if k == 'task':
        return event.task.status.state
    if k == 'status_update':
        return event.status_update.status.state
    return None


def describe(events: list[StreamResponse]) -> str:
    out = []
    for e in events:
        s = event_state(e)
        out.append(kind(e) + (f'({STATE(s)})' if s is not None else ''))
    return ' → '.join(out)


async def run(echo_sock: str, sleep_sock: str) -> None:
    # 1. The card, through the SDK's own resolver over the socket.
    card = await agentd_unix.fetch_card(echo_sock)
    first = card.supported_interfaces[0]
    check(first.protocol_binding == agentd_unix.BINDING_UNIX, f'first interface binding is {first.protocol_binding!r}')
    check(first.url == f'unix://{echo_sock}', f'first interface url is {first.url!r}, expected unix://{echo_sock}')
    check(first.protocol_version == '1.0', f'protocolVersion {first.protocol_version!r}')
    check(card.capabilities.streaming, 'card says streaming: false')
    ok('card', f'{card.name!r} v{card.version}, interface {first.protocol_binding} {first.url}, streaming')

    # 2. A stock factory must refuse the card (no JSONRPC interface it can use);
    #    the shim's factory selects the unix interface.
    try:
        ClientFactory().create(card)
        raise CheckFailed('a stock ClientFactory accepted a card with only the unix binding')
    except ValueError as e:
        stock = str(e)
    blocking = agentd_unix.client_factory(echo_sock, agentd_unix.ClientConfig(streaming=False)).create(card)
    ok('select', f'stock factory refuses ({stock}); shim factory picks {agentd_unix.BINDING_UNIX}')

    async with blocking:
        # 3. Blocking SendMessage to the echo agent.
        t0 = time.monotonic()
        events = [e async for e in blocking.send_message(SendMessageRequest(message=user_message('hello from python')))]
        check(len(events) == 1, f'blocking send gave {len(events)} results: {describe(events)}')
        check(kind(events[0]) == 'task', f'blocking send answered {kind(events[0])}, expected a task')
        task = events[0].task
        check(
            task.status.state == TaskState.TASK_STATE_COMPLETED, f'blocking send: state {STATE(task.status.state)}'
        )
        texts = [get_artifact_text(a) for a in task.artifacts]
        check(texts == ['hello from python'], f'blocking send: artifacts {texts!r}')
        blocking_id = task.id
        ok('send', f'task {task.id} COMPLETED, artifact {texts[0]!r} ({(time.monotonic() - t0) * 1000:.0f} ms)')

    # 4. SendStreamingMessage through the SDK's streaming client.
    async with await agentd_unix.connect(echo_sock, streaming=True, card=card) as streaming:
        events = [e async for e in streaming.send_message(SendMessageRequest(message=user_message('stream me')))]
        check(events and kind(events[0]) == 'task', f'stream does not start with a task: {describe(events)}')
        task_id = events[0].task.id
        context_id = events[0].task.context_id
        ranks = []
        artifacts = []
        for e in events:
            k = kind(e)
            if k == 'status_update':
                check(
                    e.status_update.task_id == task_id and e.status_update.context_id == context_id,
                    f'status update for another task/context: {e}',
                )
            if k == 'artifact_update':
                check(
                    e.artifact_update.task_id == task_id and e.artifact_update.context_id == context_id,
                    f'artifact update for another task/context: {e}',
                )
                artifacts.append(get_artifact_text(e.artifact_update.artifact))
            s = event_state(e)
            if s is not None:
                check(s in ORDER, f'unexpected state {STATE(s)} in {describe(events)}')
                ranks.append(ORDER[s])
        check(ranks == sorted(ranks), f'states out of order: {describe(events)}')
        last = events[-1]
        check(
            kind(last) == 'status_update' and last.status_update.status.state == TaskState.TASK_STATE_COMPLETED,
            f'stream does not end COMPLETED: {describe(events)}',
        )
        check(''.join(artifacts) == 'stream me', f'streamed artifact text {artifacts!r}')
        ok('stream', describe(events))

        # 5. GetTask.
        got = await streaming.get_task(GetTaskRequest(id=task_id))
        check(got.id == task_id, f'GetTask returned task {got.id}')
        check(got.status.state == TaskState.TASK_STATE_COMPLETED, f'GetTask: state {STATE(got.status.state)}')
        check(
            [get_artifact_text(a) for a in got.artifacts] == ['stream me'], f'GetTask: artifacts {list(got.artifacts)}'
        )
        user_texts = [p.text for m in got.history if m.role == Role.ROLE_USER for p in m.parts]
        check('stream me' in user_texts, f'GetTask: user message missing from history {user_texts!r}')
        ok('get', f'task {task_id} COMPLETED with its artifact and history ({len(got.history)} messages)')

        try:
            await streaming.get_task(GetTaskRequest(id='no-such-task'))
            raise CheckFailed('GetTask of an unknown id succeeded')
        except TaskNotFoundError as e:
            ok('get-unknown', f'TaskNotFoundError ({e})')

        # 6. ListTasks.
        listed = await streaming.list_tasks(ListTasksRequest())
        ids = [t.id for t in listed.tasks]
        check(task_id in ids and blocking_id in ids, f'ListTasks lacks our tasks: {ids}')
        check(listed.next_page_token == '', f'ListTasks nextPageToken {listed.next_page_token!r}')
        check(listed.total_size == len(ids), f'ListTasks totalSize {listed.total_size} for {len(ids)} tasks')
        only = await streaming.list_tasks(ListTasksRequest(context_id=context_id))
        check([t.id for t in only.tasks] == [task_id], f'ListTasks by contextId: {[t.id for t in only.tasks]}')
        ok('list', f'{len(ids)} tasks, filter by contextId gives 1')

    # 7. Cancel a running `sleep 30` task, watched by a SubscribeToTask stream.
    sleep_card = await agentd_unix.fetch_card(sleep_sock)
    async with await agentd_unix.connect(sleep_sock, streaming=False, card=sleep_card) as c, await agentd_unix.connect(
        sleep_sock, streaming=True, card=sleep_card
    ) as sub:
        request = SendMessageRequest(
            message=user_message('zzz'), configuration=SendMessageConfiguration(return_immediately=True)
        )
        events = [e async for e in c.send_message(request)]
        check(len(events) == 1 and kind(events[0]) == 'task', f'returnImmediately send: {describe(events)}')
        sleeping = events[0].task
        check(
            sleeping.status.state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING),
            f'returnImmediately: state {STATE(sleeping.status.state)}',
        )
        ok('send-nonblocking', f'task {sleeping.id} {STATE(sleeping.status.state)}')

        seen: list[StreamResponse] = []
        first_event = asyncio.Event()

        async def watch() -> None:
            async for e in sub.subscribe(SubscribeToTaskRequest(id=sleeping.id)):
                seen.append(e)
                first_event.set()

        watcher = asyncio.create_task(watch())
        await asyncio.wait_for(first_event.wait(), 10)
        check(kind(seen[0]) == 'task', f'SubscribeToTask did not start with a task snapshot: {describe(seen)}')

        t0 = time.monotonic()
        canceled = await c.cancel_task(CancelTaskRequest(id=sleeping.id))
        state = canceled.status.state
        deadline = time.monotonic() + 20
        while state != TaskState.TASK_STATE_CANCELED and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            state = (await c.get_task(GetTaskRequest(id=sleeping.id))).status.state
        check(state == TaskState.TASK_STATE_CANCELED, f'after CancelTask the task is {STATE(state)}')
        ok(
            'cancel',
            f'task {sleeping.id} CANCELED (CancelTask answered {STATE(canceled.status.state)}, '
            f'{(time.monotonic() - t0) * 1000:.0f} ms)',
        )

        await asyncio.wait_for(watcher, 20)
        last = seen[-1]
        check(
            kind(last) == 'status_update' and last.status_update.status.state == TaskState.TASK_STATE_CANCELED,
            f'subscription did not end CANCELED: {describe(seen)}',
        )
        ok('subscribe', describe(seen))

        try:
            await c.cancel_task(CancelTaskRequest(id=sleeping.id))
            raise CheckFailed('a second CancelTask of a canceled task succeeded')
        except TaskNotCancelableError as e:
            ok('cancel-again', f'TaskNotCancelableError ({e})')


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    import a2a  # noqa: PLC0415
    from importlib.metadata import version  # noqa: PLC0415

    print(f'a2a-sdk {version("a2a-sdk")} ({os.path.dirname(a2a.__file__)}), httpx {version("httpx")}', flush=True)
    try:
        asyncio.run(asyncio.wait_for(run(sys.argv[1], sys.argv[2]), 90))
    except CheckFailed as e:
        print(f'FAIL {e}', flush=True)
        return 1
    except Exception:  # noqa: BLE001
        print('FAIL unexpected exception:', flush=True)
        traceback.print_exc(file=sys.stdout)
        return 1
    print('all checks passed', flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
