#!/usr/bin/env python3
"""A jsonl agent that answers every task with one large artifact (bench/scale.py).

    large_jsonl.py BYTES [CHUNK]

Writes BYTES of text ('a') as one artifact in lines of CHUNK bytes of text
each (1,000,000 by default; under agentd's 4 MiB jsonl line limit), the first
with append false, the last with lastChunk true, then {"status": "completed"}.
It does not read its standard input (agentd writes it from a thread of its
own, so it need not). Standard library only.
"""

import sys


def main(argv):
    total = int(argv[1])
    chunk = int(argv[2]) if len(argv) > 2 else 1_000_000
    out = sys.stdout.buffer
    full = b"a" * chunk
    sent = 0
    while sent < total:
        n = min(chunk, total - sent)
        text = full if n == chunk else b"a" * n
        last = sent + n >= total
        out.write(
            b'{"artifact":{"artifactId":"out","name":"output","parts":[{"text":"'
            + text
            + b'"}]},"append":'
            + (b"true" if sent else b"false")
            + b',"lastChunk":'
            + (b"true" if last else b"false")
            + b"}\n"
        )
        sent += n
    out.write(b'{"status":"completed"}\n')
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
