"""The test harness's ports are distinct within a process and come from outside the
kernel's ephemeral range. CI once failed because two probes in a row returned the same
port, so one proxy's proxy and admin ports collided: "cannot listen on
127.0.0.1:33765 (admin): Address already in use". Outside the ephemeral range, no
outgoing connection (the proxy's PostgreSQL pool, a client) can take a port between
the probe and the server's bind either."""
import socket
import subprocess
import sys

from harness import ROOT, free_port  # puts scripts/ on the path
from free_port import ephemeral_range  # noqa: E402


def test_ports_are_outside_the_ephemeral_range_distinct_and_bindable():
    low, high = ephemeral_range()
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    for port in ports:
        assert not low <= port <= high, (port, low, high)
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_port_something_listens_on_is_skipped(monkeypatch):
    import free_port as module
    low, _ = ephemeral_range()
    held = socket.socket()
    for port in range(low - 1, 20000, -1):  # a port of the module's range, not handed out
        if port not in module._given:
            try:
                held.bind(("127.0.0.1", port))
                break
            except OSError:
                continue
    held.listen()
    taken = held.getsockname()[1]
    draws = []
    real_choice = module.random.choice

    def choose(pool):  # offers the held port first, then any
        draws.append(None)
        return taken if len(draws) == 1 else real_choice(pool)

    monkeypatch.setattr(module.random, "choice", choose)
    try:
        port = free_port()
    finally:
        held.close()
    assert len(draws) >= 2 and port != taken


def test_the_shell_form_prints_distinct_ports_outside_the_range():
    low, high = ephemeral_range()
    out = subprocess.run([sys.executable, "%s/scripts/free_port.py" % ROOT, "3"],
                         check=True, capture_output=True, text=True).stdout.split()
    ports = [int(p) for p in out]
    assert len(ports) == 3 and len(set(ports)) == 3
    assert all(not low <= p <= high for p in ports)


def test_each_xdist_worker_draws_from_a_share_of_its_own():
    # Two workers probing the same port before either binds it made one proxy exit
    # while its health check read the other worker's proxy on the shared admin port.
    from free_port import worker_share  # noqa: E402
    assert worker_share({}) == (0, 1)
    assert worker_share({"PYTEST_XDIST_WORKER": "gw2", "PYTEST_XDIST_WORKER_COUNT": "4"}) == (2, 4)
    assert worker_share({"PYTEST_XDIST_WORKER": "bad", "PYTEST_XDIST_WORKER_COUNT": "4"}) == (0, 1)
    shares = []
    for worker in ("gw0", "gw1", "gw2"):
        env = {"PYTEST_XDIST_WORKER": worker, "PYTEST_XDIST_WORKER_COUNT": "3", "PATH": "/usr/bin"}
        out = subprocess.run([sys.executable, "%s/scripts/free_port.py" % ROOT, "20"], env=env,
                             check=True, capture_output=True, text=True).stdout.split()
        shares.append({int(p) for p in out})
    for index, ports in enumerate(shares):
        assert len(ports) == 20 and all(p % 3 == index for p in ports), (index, ports)
