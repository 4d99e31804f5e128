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
        last = sent + n >= total
        # Three writes, not one line built by concatenation: joining a
        # megabyte into a new buffer every line cost this program more time
        # (fresh pages for each) than agentd spends on the line.
        out.write(b'{"artifact":{"artifactId":"out","name":"output","parts":[{"text":"')
        out.write(full if n == chunk else full[:n])
        out.write(
            b'"}]},"append":'
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
