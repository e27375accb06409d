"""Free TCP ports on 127.0.0.1 for servers that a test or script starts itself.

The old probe, `bind(("127.0.0.1", 0))` then close, had two races.
- Two probes in a row may get the same port back: the first probe's socket is closed,
  so the kernel is free to pick that port again. CI failed on exactly that: the proxy
  and admin ports of one proxy were both 33765, and the proxy exited with "cannot
  listen on 127.0.0.1:33765 (admin): Address already in use".
- The probe's port comes from the kernel's ephemeral range
  (net.ipv4.ip_local_port_range, 32768-60999 by default). Once the probe is closed,
  the kernel may give that port to any outgoing connection as its local end (the
  proxy's own PostgreSQL pool, an upstream connection, a test client) before the
  server binds it.

So no port is handed out twice in one process, and the ports come from outside the
ephemeral range (below it, or above it), which the kernel never uses for connect().
Each candidate is still probed with a bind, without SO_REUSEADDR, so a port that
anything listens on or still holds is skipped.

Under pytest-xdist, each worker draws from its own share of those ports (the ports
whose remainder modulo PYTEST_XDIST_WORKER_COUNT is the worker's number). Two workers
could otherwise probe the same port before either server binds it: one proxy then
exits on "Address already in use", while its test's health check reads the other
worker's proxy on the shared admin port and passes (a fresh-clone run failed so, with
ConnectionRefusedError on the proxy's own port).

Usage from a shell: python3 scripts/free_port.py [COUNT] prints COUNT distinct ports on
one line, separated by spaces (`read -r a b <<<"$(python3 scripts/free_port.py 2)"`).
"""
import functools
import os
import random
import socket
import sys

_given = set()


def ephemeral_range():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split())
            return low, high
    except (OSError, ValueError):
        return 32768, 60999


def worker_share(environ=os.environ):
    """(index, count) of this pytest-xdist worker, or (0, 1) outside xdist."""
    try:
        count = int(environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
        index = int(environ.get("PYTEST_XDIST_WORKER", "gw0")[2:])
    except ValueError:
        return 0, 1
    return (index % count, count) if count > 1 else (0, 1)


@functools.lru_cache(maxsize=None)
def _candidates():
    """The ports outside the ephemeral range, above the registered services most
    machines run (PostgreSQL's 5432, 8080 and friends), in this worker's share."""
    low, high = ephemeral_range()
    below = range(20000, low) if low > 21000 else range(0)
    above = range(high + 1, 65536) if high < 64536 else range(0)
    index, count = worker_share()
    # Built once per process, not per call.
    return [p for p in list(below) + list(above) if p % count == index]


def _bindable(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port():
    pool = _candidates()
    for _ in range(200):
        if not pool:
            break
        port = random.choice(pool)
        if port not in _given and _bindable(port):
            _given.add(port)
            return port
    # No room outside the ephemeral range on this machine: fall back to the kernel's pick.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _given.add(port)
    return port


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    print(" ".join(str(free_port()) for _ in range(count)))
