import json
import os
import re
import shutil
import ssl
import socket
import subprocess
import tempfile
import time
import uuid

import pytest

from fake_upstream import FakeUpstream
from harness import ROOT, Proxy, free_port
from pki import Pki


class Postgres:
    """The throwaway PostgreSQL the suite runs against (scripts/pg.sh)."""

    def __init__(self):
        # IDEMPROXY_TEST_CITUS=1: the DSN is a Citus coordinator (scripts/citus.sh).
        self.citus = os.environ.get("IDEMPROXY_TEST_CITUS") == "1"
        self.dir = os.environ.get("IDEMPROXY_TEST_PGDIR")
        # Under pytest-xdist (-n), each worker starts a server of its own: tests stop,
        # freeze and restart their server, which must not reach another worker's tests.
        # On Citus, a cluster of its own: tests also add and drain workers.
        if os.environ.get("PYTEST_XDIST_WORKER"):
            self.dir = None
        self.owned = self.dir is None
        self.cluster = None
        if self.owned and self.citus:
            self.cluster = tempfile.mkdtemp(prefix="idemproxy-citus-")
            os.chmod(self.cluster, 0o755)  # its servers run as postgres
            self.dsn = subprocess.run(["bash", os.path.join(ROOT, "scripts", "citus.sh"), "start",
                                       self.cluster], check=True, capture_output=True,
                                      text=True).stdout.strip()
            self.dir = os.path.join(self.cluster, "coordinator")
        elif self.owned:
            self.dir = tempfile.mkdtemp(prefix="idemproxy-pg-")
            self.dsn = self._pg("start", self.dir, "", "-c", "fsync=off").strip()
        else:
            self.dsn = os.environ["IDEMPROXY_TEST_DSN"]
        with open(os.path.join(self.dir, "port")) as f:
            self.port = f.read().strip()

    def _pg(self, *args):
        return subprocess.run(["bash", os.path.join(ROOT, "scripts", "pg.sh"), *args],
                              check=True, capture_output=True, text=True).stdout

    def stop(self):
        self._pg("stop", self.dir)

    def start(self):
        self._pg("start", self.dir, self.port)

    def signal_all(self, sig):
        """Sends `sig` to the postmaster and every process under it (SIGSTOP freezes
        the server as a stalled host does; SIGCONT thaws it)."""
        with open(os.path.join(self.dir, "data", "postmaster.pid")) as f:
            postmaster = int(f.readline())
        children = subprocess.run(["pgrep", "-P", str(postmaster)], capture_output=True,
                                  text=True).stdout.split()
        for pid in [postmaster] + [int(c) for c in children]:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:  # a backend that just exited
                pass

    def sql(self, query):
        out = subprocess.run(["psql", self.dsn, "-qAt", "-c", query], check=True,
                             capture_output=True, text=True).stdout
        return out.strip()


@pytest.fixture(scope="session")
def pg():
    p = Postgres()
    yield p
    if p.cluster:
        subprocess.run(["bash", os.path.join(ROOT, "scripts", "citus.sh"), "stop", p.cluster],
                       check=False, capture_output=True)
        shutil.rmtree(p.cluster, ignore_errors=True)
    elif p.owned:
        p.stop()
        shutil.rmtree(p.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def upstream():
    u = FakeUpstream()
    yield u
    u.close()


@pytest.fixture(scope="session")
def pki(tmp_path_factory):
    return Pki(str(tmp_path_factory.mktemp("pki")))


@pytest.fixture(scope="session")
def tls_upstream(pki):
    """The fake upstream over HTTPS, with the test CA's server certificate."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*pki.server)
    u = FakeUpstream(tls=context)
    yield u
    u.close()


@pytest.fixture
def make_proxy(pg, upstream):
    started = []

    def make(start=True, args=(), upstream_url=None, dsn=None, **config):
        p = Proxy(upstream_url or upstream.url, dsn or pg.dsn, **config)
        started.append(p)
        return p.start(*args) if start else p

    yield make
    for p in started:
        p.kill()
    # A sanitizer build reports races and memory errors in the proxy's log; any
    # report fails the test that produced it.
    for p in started:
        log = p.read_log() if os.path.exists(p.log_path) else ""
        for marker in ("WARNING: ThreadSanitizer", "ERROR: AddressSanitizer",
                       "runtime error:", "ERROR: LeakSanitizer"):
            assert marker not in log, "sanitizer report in %s:\n%s" % (p.log_path, log[-4000:])


@pytest.fixture
def proxy(make_proxy):
    return make_proxy()


@pytest.fixture
def key():
    return "key-" + uuid.uuid4().hex


class Ledger:
    """The two figures every fault-injection run reports, both of which must be 0:
    requests executed more than once, and responses lost or mismatched. A response
    is lost when a client got a 2xx for a key but a later retry does not replay that
    exact answer; mismatched when a client got a body that is not its key's."""

    def __init__(self):
        self.keys = 0
        self.executed_twice = []
        self.lost_or_mismatched = []

    def check(self, upstream, key, delivered, final=None):
        self.keys += 1
        executions = upstream.executions.count(key=key)
        if executions > 1:
            self.executed_twice.append(key)
        bodies = {r.body for r in delivered if r is not None and 200 <= r.status < 300}
        problems = []
        if len(bodies) > 1:
            problems.append("different 2xx bodies")
        for body in bodies:
            try:
                if json.loads(body).get("key") != key:
                    problems.append("another key's body")
            except ValueError:
                problems.append("unparseable body")
        if bodies and executions == 0:
            problems.append("a 2xx without an execution")
        if bodies and final is not None and final.body not in bodies:
            problems.append("retry got %d, not the delivered answer" % final.status)
        if problems:
            self.lost_or_mismatched.append((key, problems))
        return executions, problems


LEDGER = Ledger()


@pytest.fixture
def ledger():
    before = (len(LEDGER.executed_twice), len(LEDGER.lost_or_mismatched))
    yield LEDGER
    assert LEDGER.executed_twice[before[0]:] == [], "executed more than once"
    assert LEDGER.lost_or_mismatched[before[1]:] == [], "responses lost or mismatched"


def pytest_terminal_summary(terminalreporter):
    if LEDGER.keys:
        terminalreporter.write_line(
            "fault injection: %d keys checked; executed more than once: %d; "
            "responses lost or mismatched: %d"
            % (LEDGER.keys, len(LEDGER.executed_twice), len(LEDGER.lost_or_mismatched)))


class PgBouncer:
    """A real PgBouncer in transaction-pooling mode in front of the test database."""

    def __init__(self, pg, settings=""):
        self.dir = tempfile.mkdtemp(prefix="idemproxy-pgbouncer-")
        os.chmod(self.dir, 0o755)
        self.port = free_port()
        ini = os.path.join(self.dir, "pgbouncer.ini")
        with open(os.path.join(self.dir, "userlist.txt"), "w") as f:
            f.write('"postgres" ""\n')
        with open(ini, "w") as f:
            f.write("[databases]\nidemproxy = host=127.0.0.1 port=%s dbname=idemproxy user=postgres\n"
                    "[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = %d\n"
                    "auth_type = trust\nauth_file = %s/userlist.txt\npool_mode = transaction\n"
                    "max_client_conn = 500\ndefault_pool_size = 8\nunix_socket_dir =\n"
                    "logfile = %s/pgbouncer.log\nignore_startup_parameters = extra_float_digits\n"
                    % (pg.port, self.port, self.dir, self.dir) + settings)
        cmd = ["/usr/sbin/pgbouncer", ini]
        if os.geteuid() == 0:  # PgBouncer refuses to run as root
            subprocess.run(["chown", "-R", "postgres", self.dir], check=True)
            cmd = ["runuser", "-u", "postgres", "--"] + cmd
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.dsn = "postgresql://postgres@127.0.0.1:%d/idemproxy" % self.port
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("pgbouncer did not start")

    def repoint(self, port):
        """Points the database at another server and reloads, as a failover hook does."""
        ini = os.path.join(self.dir, "pgbouncer.ini")
        with open(ini) as f:
            text = f.read()
        text = re.sub(r"port=\d+ dbname", "port=%s dbname" % port, text)
        with open(ini, "w") as f:
            f.write(text)
        subprocess.run(["pkill", "-HUP", "-f", "pgbouncer " + ini], check=True)

    def close(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)


@pytest.fixture(scope="session")
def pgbouncer(pg):
    b = PgBouncer(pg)
    yield b
    b.close()
