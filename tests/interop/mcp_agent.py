#!/usr/bin/env python3
"""A jsonl agent for tests/interop_mcp.rs (stdlib only). Its first message's
text picks what it does:

    plan DEST        progress, a streamed artifact, then asks which day (input-required)
    echo             returns its data parts as an artifact and completes
    stubborn PATH    ignores SIGTERM, forks two children that ignore it too, writes
                     "pid pgid child child" to PATH, and never ends on its own
"""
import json
import os
import signal
import subprocess
import sys
import time


def say(obj):
    print(json.dumps(obj), flush=True)


def next_message():
    line = sys.stdin.readline()
    if not line:  # stdin closed: the task is over
        sys.exit(0)
    return json.loads(line)["message"]


def text_of(message):
    return " ".join(p["text"] for p in message["parts"] if "text" in p).strip()


first = next_message()
words = text_of(first).split(" ", 1)
verb, rest = words[0], (words[1] if len(words) > 1 else "")

if verb == "plan":
    say({"status": "working", "text": f"Planning a trip to {rest}"})
    for i, step in enumerate(["checking trains", "checking hotels"]):
        time.sleep(0.05)
        say({"artifact": {"artifactId": "plan", "name": "plan", "parts": [{"text": f"- {step}\n"}]},
             "append": i > 0})
    say({"status": "input-required", "text": f"Which day do you want to leave for {rest}?"})
    day = text_of(next_message())
    say({"artifact": {"artifactId": "plan", "parts": [{"text": f"- booked: {rest}, leaving {day}\n"}]},
         "append": True, "lastChunk": True})
    say({"status": "completed", "text": f"Your trip to {rest} leaves {day}."})
elif verb == "echo":
    data = [p["data"] for p in first["parts"] if "data" in p]
    say({"artifact": {"artifactId": "echo", "name": "echo", "parts": [{"text": json.dumps(data)}]}})
    say({"status": "completed", "text": "echoed"})
elif verb == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # SIG_IGN survives exec, and the shell's trap says it again.
    a = subprocess.Popen(["sh", "-c", "trap '' TERM; sleep 1000"])
    b = subprocess.Popen(["sleep", "1000"])
    with open(rest + ".tmp", "w") as f:
        f.write(f"{os.getpid()} {os.getpgid(0)} {a.pid} {b.pid}\n")
    os.rename(rest + ".tmp", rest)
    say({"status": "working", "text": "holding on"})
    while True:
        time.sleep(1)
else:
    say({"status": "rejected", "text": f"unknown verb {verb!r}"})
