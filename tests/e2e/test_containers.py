"""No container engine runs here, so check what can be checked: every YAML parses and
is shaped right, the shipped configs pass check-config, and the image's runtime
packages provide every library the binary links."""
import os
import re
import subprocess

import yaml

from harness import BINARY, ROOT

DOCKER = os.path.join(ROOT, "docker")
# The image ships the Release build, whatever binary the rest of the suite runs.
RELEASE_BINARY = os.path.join(ROOT, "build", "idemproxy")


def load_all(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def check_config_text(tmp_path, text, env):
    path = tmp_path / "idemproxy.yaml"
    path.write_text(text)
    return subprocess.run([BINARY, "check-config", "--config", str(path)], capture_output=True,
                          text=True, env=dict(os.environ, **env))


def test_compose_file_is_valid_and_wires_the_sidecar():
    (doc,) = load_all(os.path.join(DOCKER, "compose.yaml"))
    services = doc["services"]
    assert set(services) == {"postgres", "upstream", "idemproxy"}
    proxy = services["idemproxy"]
    assert proxy["build"]["dockerfile"] == "docker/Dockerfile"
    assert proxy["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert proxy["network_mode"] == "service:upstream"
    assert "/readyz" in " ".join(proxy["healthcheck"]["test"])
    assert proxy["environment"]["IDEMPROXY_PG_DSN"].startswith("postgresql://")
    mounted = services["upstream"]["volumes"][0].split(":")[0]
    assert os.path.exists(os.path.normpath(os.path.join(DOCKER, mounted)))


def test_k8s_pod_runs_idemproxy_as_a_probed_sidecar_with_config_from_a_configmap(tmp_path):
    (pod,) = load_all(os.path.join(DOCKER, "k8s", "pod.yaml"))
    (configmap,) = load_all(os.path.join(DOCKER, "k8s", "configmap.yaml"))
    assert pod["kind"] == "Pod" and configmap["kind"] == "ConfigMap"
    containers = {c["name"]: c for c in pod["spec"]["containers"]}
    sidecar = containers["idemproxy"]
    assert sidecar["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert sidecar["livenessProbe"]["httpGet"]["path"] == "/healthz"
    ports = {p["name"]: p["containerPort"] for p in sidecar["ports"]}
    assert sidecar["readinessProbe"]["httpGet"]["port"] in ports
    volume = pod["spec"]["volumes"][0]
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    assert sidecar["args"][-1] == "/etc/idemproxy/idemproxy.yaml"
    assert sidecar["volumeMounts"][0]["mountPath"] == "/etc/idemproxy"
    # The embedded config is a real idemproxy config, and its ports match the Pod's.
    text = configmap["data"]["idemproxy.yaml"]
    out = check_config_text(tmp_path, text, {"IDEMPROXY_PG_DSN": "postgresql://u@h/db"})
    assert out.returncode == 0, out.stderr
    assert ":%d" % ports["proxy"] in text and ":%d" % ports["admin"] in text
    grace = pod["spec"]["terminationGracePeriodSeconds"]
    assert grace > int(re.search(r"drain_timeout: (\d+)s", text).group(1))


def test_shipped_configs_pass_check_config(tmp_path):
    for name in ("idemproxy.yaml", "memory.yaml"):
        text = open(os.path.join(ROOT, "config", name)).read()
        out = check_config_text(tmp_path, text, {"IDEMPROXY_PG_DSN": "postgresql://u@h/db"})
        assert out.returncode == 0, (name, out.stderr)


def dockerfile():
    return open(os.path.join(DOCKER, "Dockerfile")).read()


def test_dockerfile_builds_with_the_projects_own_scripts():
    build_stage, runtime_stage = dockerfile().split("\nFROM debian:bookworm-slim\n")
    assert build_stage.startswith("#") and "FROM debian:bookworm-slim AS build" in build_stage
    assert "bash scripts/install-deps.sh" in build_stage
    assert "scripts/build.sh" in build_stage
    assert "USER idemproxy" in runtime_stage and "HEALTHCHECK" in runtime_stage
    assert "useradd --system" in runtime_stage


def dependency_closure(packages):
    """Every package apt installs for these, following Depends and PreDepends."""
    out = subprocess.run(["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests",
                          "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances",
                          *sorted(packages)], capture_output=True, text=True, check=True).stdout
    closure = set(packages)
    for line in out.splitlines():
        name = line.split(":", 1)[-1].strip().strip("<>") if ":" in line else line.strip()
        closure.add(name.split(":")[0])
    return closure


def test_runtime_image_packages_provide_every_linked_library():
    runtime_stage = dockerfile().split("\nFROM debian:bookworm-slim\n")[1]
    install = runtime_stage[runtime_stage.index("apt-get install"):runtime_stage.index("&& rm -rf")]
    listed = set(re.findall(r"\b(lib[\w.+-]+|curl|ca-certificates)\b", install))
    closure = dependency_closure(listed)
    ldd = subprocess.run(["ldd", RELEASE_BINARY], capture_output=True, text=True,
                         check=True).stdout
    libs = re.findall(r"=> (/\S+)", ldd)
    assert len(libs) > 5
    missing = []
    for lib in libs:
        owner = subprocess.run(["dpkg", "-S", os.path.realpath(lib)], capture_output=True,
                               text=True)
        if owner.returncode != 0:
            owner = subprocess.run(["dpkg", "-S", lib], capture_output=True, text=True)
        package = owner.stdout.split(":")[0].strip()
        if package not in closure:
            missing.append((lib, package))
    assert not missing, "add these runtime packages to docker/Dockerfile: %s" % missing
