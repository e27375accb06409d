import os
import subprocess
import tempfile
import uuid

import pytest

from fake_upstream import FakeUpstream
from harness import ROOT, Proxy


class Postgres:
    """The throwaway PostgreSQL the suite runs against (scripts/pg.sh)."""

    def __init__(self):
        self.dir = os.environ.get("IDEMPROXY_TEST_PGDIR")
        self.owned = self.dir is None
        if self.owned:
            self.dir = tempfile.mkdtemp(prefix="idemproxy-pg-")
            self.dsn = self._pg("start", self.dir).strip()
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

    def sql(self, query):
        out = subprocess.run(["psql", self.dsn, "-qAt", "-c", query], check=True,
                             capture_output=True, text=True).stdout
        return out.strip()


@pytest.fixture(scope="session")
def pg():
    p = Postgres()
    yield p
    if p.owned:
        p.stop()


@pytest.fixture(scope="session")
def upstream():
    u = FakeUpstream()
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


@pytest.fixture
def proxy(make_proxy):
    return make_proxy()


@pytest.fixture
def key():
    return "key-" + uuid.uuid4().hex
