"""Sends one message to agentd with the official A2A Python SDK, through the
shim beside this file. Run it from the clone, with `agentd serve --listen
unix:///tmp/agentd.sock` running (see README.md here):

    python3 examples/python/hello.py /tmp/agentd.sock hello
"""

import asyncio
import os
import sys

# The shim is a single file, not a package on PyPI: put its directory on the path.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from a2a.helpers import new_text_message  # noqa: E402
from a2a.types import Role, SendMessageRequest, TaskState  # noqa: E402

from agentd_unix import connect  # noqa: E402


async def main(socket_path: str, text: str) -> None:
    async with await connect(socket_path, streaming=False) as client:
        message = new_text_message(text, role=Role.ROLE_USER)
        async for event in client.send_message(SendMessageRequest(message=message)):
            task = event.task
            print(task.id, TaskState.Name(task.status.state))
            for artifact in task.artifacts:
                for part in artifact.parts:
                    print(part.text, end="")


if __name__ == "__main__":
    path = sys.argv[1] if len(sys.argv) > 1 else "/tmp/agentd.sock"
    asyncio.run(main(path, " ".join(sys.argv[2:]) or "hello"))
