#!/usr/bin/env python3
"""A jsonl agent for agentd (stdlib only): streams progress, asks a question,
and uses the answer — the whole A2A task model from ~40 lines of Python.

    agentd serve --listen unix:///tmp/agentd.sock \
        --exec 'python3 examples/agents/trip_planner.py' --exec-protocol jsonl

agentd writes one line per message it receives:
    {"message": {...A2A Message...}, "task": {"id": "...", "contextId": "..."}}
and reads one JSON object per line from us (see `man agentd`, THE JSONL PROTOCOL).
"""
import json
import sys
import time


def say(obj):
    print(json.dumps(obj), flush=True)


def next_text():
    line = sys.stdin.readline()
    if not line:  # agentd closed our stdin: the task is over
        sys.exit(0)
    message = json.loads(line)["message"]
    return " ".join(p["text"] for p in message["parts"] if "text" in p).strip()


destination = next_text()
if not destination:
    say({"status": "rejected", "text": "Tell me where you want to go."})
    sys.exit(0)

say({"status": "working", "text": f"Planning a trip to {destination}"})
for i, step in enumerate(["checking trains", "checking hotels", "checking the weather"]):
    time.sleep(0.05)
    say({"artifact": {"artifactId": "plan", "name": "plan", "parts": [{"text": f"- {step}\n"}]},
         "append": i > 0})

say({"status": "input-required", "text": f"Which day do you want to leave for {destination}?"})
day = next_text()

say({"artifact": {"artifactId": "plan", "parts": [{"text": f"- booked: {destination}, leaving {day}\n"}]},
     "append": True, "lastChunk": True})
say({"status": "completed", "text": f"Your trip to {destination} leaves {day}."})
