"""The container image, built by scripts/image.sh and run with podman against the
test PostgreSQL and the fake upstream: claim, replay and 422 through it, as the
non-root user 10001, read-only and without capabilities, as Kubernetes runs it.
IDEMPROXY_IMAGE names the image and IDEMPROXY_DEB_DIR where image.sh wrote its .deb
(scripts/test.sh runs these tests on idemproxy:test, which installs the Release
build's package, and on idemproxy:source, compiled by the Dockerfile itself)."""
import json
import os
import re
import subprocess
import time

import pytest

from harness import ROOT, free_port, request

IMAGE = os.environ.get("IDEMPROXY_IMAGE", "idemproxy:test")
DEB_DIR = os.environ.get("IDEMPROXY_DEB_DIR", os.path.join(ROOT, "build"))
PODMAN = ["podman", "--runtime", "runc", "--cgroup-manager=cgroupfs"]
LIMITS = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1000:1000", "--network", "host"]


def podman(*args, check=True, timeout=120):
    out = subprocess.run([*PODMAN, *args], capture_output=True, text=True, timeout=timeout)
    if check:
        assert out.returncode == 0, (args, out.stderr)
    return out


def in_image(*command, entrypoint):
    return podman("run", "--rm", *LIMITS, "--entrypoint", entrypoint, IMAGE, *command,
                  check=False)


@pytest.fixture(scope="module", autouse=True)
def image():
    assert podman("image", "exists", IMAGE, check=False).returncode == 0, \
        "no image %s: run scripts/image.sh test first" % IMAGE
    return IMAGE


@pytest.fixture
def container(pg, upstream):
    port, admin = free_port(), free_port()
    name = "idemproxy-test-%d" % port
    podman("run", "-d", "--name", name, *LIMITS,
           "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
           "-e", "IDEMPROXY_PG_DSN=" + pg.dsn, "-e", "IDEMPROXY_UPSTREAM=" + upstream.url,
           "-e", "IDEMPROXY_LISTEN=127.0.0.1:%d" % port,
           "-e", "IDEMPROXY_ADMIN_LISTEN=127.0.0.1:%d" % admin, IMAGE)
    try:
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                if request(admin, "GET", "/readyz", timeout=1).status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        yield {"name": name, "port": port, "admin": admin}
    finally:
        podman("rm", "-f", name, check=False)


def post(port, body, key):
    return request(port, "POST", "/v1/orders", body,
                   {"Content-Type": "application/json", "Idempotency-Key": key})


def test_the_image_claims_replays_and_refuses_a_reused_key(container, upstream, key):
    assert request(container["admin"], "GET", "/readyz").status == 200
    first = post(container["port"], '{"amount": 1}', key)
    assert first.status == 201 and first.header("Idempotent-Replayed") is None
    again = post(container["port"], '{"amount": 1}', key)
    assert again.status == 201 and again.header("Idempotent-Replayed") == "true"
    assert again.body == first.body
    other = post(container["port"], '{"amount": 2}', key)
    assert other.status == 422
    assert upstream.executions.count(key=key) == 1
    # SIGTERM drains and exits 0.
    podman("stop", "-t", "20", container["name"])
    state = json.loads(podman("inspect", container["name"]).stdout)[0]["State"]
    assert state["ExitCode"] == 0
    logs = podman("logs", container["name"]).stdout + podman("logs", container["name"]).stderr
    assert "protecting" in logs and "stopped" in logs


def test_the_image_runs_as_10001_without_curl_or_a_compiler():
    assert in_image("-u", entrypoint="id").stdout.strip() == "10001"
    found = in_image("-c", "for t in curl wget gcc g++ cc c++ make cmake; do command -v $t; done",
                     entrypoint="bash").stdout
    assert found.strip() == ""
    # The classic sidecar's preStop hook runs `sleep` (deploy/kubernetes).
    assert in_image("0", entrypoint="sleep").returncode == 0


def test_the_binary_is_stripped_and_the_labels_name_the_build(tmp_path):
    ctr = podman("create", IMAGE).stdout.strip()
    try:
        podman("cp", ctr + ":/usr/bin/idemproxy", str(tmp_path / "idemproxy"))
    finally:
        podman("rm", ctr, check=False)
    sections = subprocess.run(["readelf", "-S", str(tmp_path / "idemproxy")],
                              capture_output=True, text=True, check=True).stdout
    assert ".symtab" not in sections and ".debug_info" not in sections
    labels = json.loads(podman("image", "inspect", IMAGE).stdout)[0]["Labels"]
    version = re.search(r"project\(idemproxy VERSION ([0-9.]+)",
                        open(os.path.join(ROOT, "CMakeLists.txt")).read()).group(1)
    assert labels["org.opencontainers.image.version"] == version
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert labels["org.opencontainers.image.source"].startswith("https://")
    revision = labels["org.opencontainers.image.revision"]
    assert revision and revision != "unknown"
    shown = in_image("--version", entrypoint="/usr/bin/idemproxy").stdout
    assert shown.strip() == "idemproxy %s (%s)" % (version, revision)


def test_the_image_is_small():
    size = int(podman("image", "inspect", "--format", "{{.Size}}", IMAGE).stdout)
    base = int(podman("image", "inspect", "--format", "{{.Size}}",
                      "docker.io/library/debian:bookworm-slim").stdout)
    print("image %s: %.1f MiB, of which the Debian base %.1f MiB" % (IMAGE, size / 2**20,
                                                                    base / 2**20))
    assert size - base < 40 * 2**20  # idemproxy, its libraries and certificates


def test_the_deb_installs_with_apt_into_the_bare_base_and_runs(tmp_path):
    debs = [f for f in os.listdir(DEB_DIR) if f.endswith("_amd64.deb")]
    assert debs, "scripts/image.sh writes %s/idemproxy_VERSION_amd64.deb" % DEB_DIR
    deb = os.path.join(DEB_DIR, sorted(debs)[-1])
    fields = subprocess.run(["dpkg-deb", "--field", deb], capture_output=True, text=True,
                            check=True).stdout
    assert "Package: idemproxy" in fields and "libpqxx-6.4" in fields
    listing = subprocess.run(["dpkg-deb", "--contents", deb], capture_output=True, text=True,
                             check=True).stdout
    for path in ("./usr/bin/idemproxy", "./usr/share/idemproxy/idemproxy.yaml",
                 "./usr/share/doc/idemproxy/LICENSE"):
        assert path in listing, listing
    # apt resolves the package's Depends from Debian's archive, in the bare base.
    out = podman("run", "--rm", *LIMITS, "-v", "%s:/tmp/idemproxy.deb:ro" % deb,
                 "docker.io/library/debian:bookworm-slim", "bash", "-c",
                 "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
                 "--no-install-recommends /tmp/idemproxy.deb >/dev/null && "
                 "idemproxy --version && idemproxy check-config --config "
                 "/usr/share/idemproxy/memory.yaml", check=False, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("idemproxy ")
