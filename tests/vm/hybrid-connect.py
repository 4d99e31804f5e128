#!/usr/bin/env python3
"""hybrid-connect.py SOCKET PORT [TIMEOUT_S]

Dials a guest's vsock PORT through a hybrid-vsock unix SOCKET
(vhost-device-vsock / Firecracker): sends "CONNECT PORT\\n", expects
"OK <hostport>\\n", then prints the first line the guest sends. Retries until
TIMEOUT_S (default 60) while the guest is not yet listening. Prints the
seconds it waited on stderr. Exit 0 on a line, 1 on timeout.
"""
import socket
import sys
import time


def readline(s):
    buf = b""
    while not buf.endswith(b"\n"):
        c = s.recv(1)
        if not c:
            break
        buf += c
    return buf.decode(errors="replace")


def attempt(path, port):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(path)
        s.sendall(b"CONNECT %d\n" % port)
        ok = readline(s)
        if not ok.startswith("OK "):
            raise ConnectionError("handshake answer %r" % ok)
        line = readline(s)
        if not line:
            raise ConnectionError("guest closed without a line")
        return ok.strip(), line


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    path, port = sys.argv[1], int(sys.argv[2])
    timeout = float(sys.argv[3]) if len(sys.argv) == 4 else 60.0
    t0 = time.monotonic()
    last = None
    while time.monotonic() - t0 < timeout:
        try:
            ok, line = attempt(path, port)
        except (OSError, ConnectionError) as e:
            last = e
            time.sleep(0.1)
            continue
        print("%s after %.2f s (%s)" % (ok, time.monotonic() - t0, path), file=sys.stderr)
        sys.stdout.write(line)
        return 0
    print("no answer from vsock port %d via %s in %.0f s; last error: %r" % (port, path, timeout, last),
          file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
