#!/usr/bin/env python3
"""The official MCP Python SDK (`mcp`) drives `agentd mcp` over stdio, as any
MCP client would. Prints one line per check and "all checks passed" at the
end; any failure raises. Run by tests/interop_mcp.rs:

    python mcp_client.py AGENTD_BIN SOCKET PIDFILE

The daemon runs tests/interop/mcp_agent.py (jsonl). The Rust side checks
afterwards that the stubborn task's process group is gone.
"""
import asyncio
import json
import os
import re
import sys
import time

import mcp.types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

AGENTD, SOCKET, PIDFILE = sys.argv[1:4]
URI_PREFIX = "agentd://task/"


def check(cond, what, detail=""):
    if not cond:
        raise AssertionError(f"FAILED: {what} {detail}")
    print(f"ok - {what}", flush=True)


def text(result):
    return "".join(c.text for c in result.content if getattr(c, "type", "") == "text")


async def main():
    updated = []  # URIs of notifications/resources/updated

    async def on_message(message):
        if isinstance(message, types.ResourceUpdatedNotification):
            updated.append(str(message.params.uri))

    server = StdioServerParameters(command=AGENTD, args=["mcp", f"unix://{SOCKET}"])
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write, message_handler=on_message) as session:
            init = await session.initialize()
            check(init.protocol_version == "2025-11-25", "initialize negotiates 2025-11-25", init.protocol_version)
            check(init.capabilities.tools is not None, "capabilities.tools")
            check(init.capabilities.resources is not None and init.capabilities.resources.subscribe,
                  "capabilities.resources.subscribe")
            check(init.server_info.name == "agentd", "serverInfo.name")
            await session.send_ping()
            check(True, "ping")

            tools = (await session.list_tools()).tools
            names = [t.name for t in tools]
            check(names == ["subagent_spawn", "subagent_send", "subagent_status", "subagent_cancel", "subagent_list"],
                  "tools/list names the five tools", names)
            # What Claude Desktop and other hosts demand of every tool name.
            check(all(re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", n) for n in names),
                  "every tool name matches ^[a-zA-Z0-9_-]{1,64}$", names)
            check(all(t.output_schema for t in tools), "every tool has an output schema")

            # 1. Blocking spawn with progress: the turn ends at input-required.
            progress = []

            async def on_progress(value, total, message):
                progress.append((value, message))

            r = await session.call_tool("subagent_spawn", {"objective": "plan Lisbon"},
                                        progress_callback=on_progress)
            sc = r.structured_content
            check(not r.is_error, "subagent_spawn (blocking) succeeds", text(r))
            check(sc["state"] == "input-required", "the turn ends waiting for input", sc["state"])
            check("Which day" in sc["statusText"], "the status text is the question", sc["statusText"])
            check(sc["artifacts"][0]["text"] == "- checking trains\n- checking hotels\n",
                  "the artifact so far", sc["artifacts"])
            check("input-required" in text(r) and sc["taskId"] in text(r), "a text rendering of the task")
            messages = [m for _, m in progress]
            values = [v for v, _ in progress]
            check(any(m and m.startswith("artifact plan:") for m in messages), "progress carries artifacts", messages)
            check(any(m and m.startswith("working: Planning") for m in messages), "progress carries status", messages)
            check(values == sorted(values) and len(set(values)) == len(values), "progress increases", values)
            task_id = sc["taskId"]
            uri = URI_PREFIX + task_id

            # 2. Resources: listed, templated, readable, subscribable.
            listed = [str(x.uri) for x in (await session.list_resources()).resources]
            check(uri in listed, "resources/list lists the task", listed)
            templates = (await session.list_resource_templates()).resource_templates
            check([t.uri_template for t in templates] == ["agentd://task/{id}"], "the resource template")
            contents = (await session.read_resource(uri)).contents
            task = json.loads(contents[0].text)
            check(task["id"] == task_id and task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED",
                  "resources/read returns the task as JSON")
            await session.subscribe_resource(uri)
            check(True, "resources/subscribe")

            # 3. The follow-up on the same warm process.
            r = await session.call_tool("subagent_send", {"taskId": task_id, "text": "Friday"})
            sc = r.structured_content
            check(not r.is_error and sc["state"] == "completed", "subagent_send completes the task", text(r))
            check("- booked: Lisbon, leaving Friday\n" in sc["artifacts"][0]["text"], "the answer reached the process")
            deadline = time.monotonic() + 10
            while uri not in updated and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            check(uri in updated, "notifications/resources/updated for the subscribed task", updated)
            await session.unsubscribe_resource(uri)

            # 4. returnImmediately, data parts and annotations.
            r = await session.call_tool("subagent_spawn", {
                "objective": "echo", "data": [{"k": 1}], "annotations": {"suite": "mcp"},
                "returnImmediately": True})
            sc = r.structured_content
            check(not r.is_error and sc["state"] in ("submitted", "working", "completed"),
                  "subagent_spawn returnImmediately answers at once", sc.get("state"))
            echo_id = sc["taskId"]
            deadline = time.monotonic() + 10
            while True:
                r = await session.call_tool("subagent_status", {"taskId": echo_id})
                if r.structured_content["state"] == "completed" or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.05)
            sc = r.structured_content
            check(sc["state"] == "completed", "subagent_status sees it complete", sc["state"])
            check(json.loads(sc["artifacts"][0]["text"]) == [{"k": 1}], "the data part reached the program")
            check(sc.get("annotations") == {"suite": "mcp"}, "annotations are on the task", sc.get("annotations"))

            r = await session.call_tool("subagent_list", {"annotations": {"suite": "mcp"}})
            check([t["taskId"] for t in r.structured_content["tasks"]] == [echo_id],
                  "subagent_list filters by annotation", r.structured_content)
            r = await session.call_tool("subagent_list", {"state": "completed", "pageSize": 1})
            page = r.structured_content
            check(len(page["tasks"]) == 1 and page["totalSize"] == 2 and page.get("nextPageToken"),
                  "subagent_list filters by state and pages", page)

            # 5. A stubborn program: cancel runs the kill ladder.
            r = await session.call_tool("subagent_spawn", {"objective": f"stubborn {PIDFILE}",
                                                           "returnImmediately": True})
            stubborn = r.structured_content["taskId"]
            deadline = time.monotonic() + 10
            while not os.path.exists(PIDFILE) and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            check(os.path.exists(PIDFILE), "the stubborn program started")
            started = time.monotonic()
            r = await session.call_tool("subagent_cancel", {"taskId": stubborn})
            sc = r.structured_content
            check(not r.is_error and sc["state"] == "canceled", "subagent_cancel answers CANCELED", text(r))
            print(f"   (cancel took {time.monotonic() - started:.2f} s)", flush=True)
            r = await session.call_tool("subagent_cancel", {"taskId": stubborn})
            check(not r.is_error and "already ended" in r.structured_content.get("note", ""),
                  "cancelling a finished task says so", text(r))

            # 6. RFC 0020's dotted spelling still reaches the tool.
            r = await session.call_tool("subagent.status", {"taskId": echo_id})
            check(not r.is_error and r.structured_content["taskId"] == echo_id,
                  "a dotted tool name (subagent.status) still works", text(r))

            # 7. Errors are tool results.
            r = await session.call_tool("subagent_status", {"taskId": "no-such-task"})
            check(r.is_error and "task not found" in text(r), "an unknown task is a tool error", text(r))
    print("all checks passed", flush=True)


asyncio.run(main())
