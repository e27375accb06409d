"""The Kubernetes manifests (deploy/kubernetes): each overlay renders with
`kubectl kustomize`, every object validates against the Kubernetes API schemas
(kubernetes-models, offline), the Pod meets Pod Security "restricted", and the
embedded idemproxy config passes check-config with the Secret's values."""
import json
import os
import re
import shutil
import subprocess

import pytest
import yaml

from harness import BINARY, ROOT

KUSTOMIZE = os.path.join(ROOT, "deploy", "kubernetes")
OVERLAYS = ["native-sidecar", "classic-sidecar"]
VALIDATE = os.path.join(ROOT, "tests", "kubernetes", "validate.js")


def render(path):
    out = subprocess.run(["kubectl", "kustomize", path], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def by_kind(objects):
    found = {}
    for o in objects:
        assert o["kind"] not in found, "one %s expected" % o["kind"]
        found[o["kind"]] = o
    return found


def pod_spec(objects):
    return by_kind(objects)["Deployment"]["spec"]["template"]["spec"]


def sidecar(spec):
    every = spec.get("initContainers", []) + spec["containers"]
    (proxy,) = [c for c in every if c["name"] == "idemproxy"]
    return proxy


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_rendered_object_validates_against_the_kubernetes_schemas(overlay):
    objects = render(os.path.join(KUSTOMIZE, "overlays", overlay))
    assert set(by_kind(objects)) == {"ConfigMap", "Secret", "Service", "Deployment"}
    out = subprocess.run(["node", VALIDATE], input=json.dumps(objects), capture_output=True,
                         text=True, cwd=os.path.dirname(VALIDATE))
    assert out.returncode == 0, out.stderr
    results = [json.loads(l) for l in out.stdout.splitlines()]
    assert len(results) == len(objects)
    assert [r for r in results if r["error"]] == []
    assert all(o["metadata"]["namespace"] == "orders" for o in objects)


def test_the_validator_rejects_a_broken_object():
    broken = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
              "spec": {"replicas": "two", "selector": {},
                       "template": {"spec": {"containers": [{"image": "a"}]}}}}
    out = subprocess.run(["node", VALIDATE], input=json.dumps([broken]), capture_output=True,
                         text=True, cwd=os.path.dirname(VALIDATE))
    error = json.loads(out.stdout)["error"]
    assert "replicas must be integer" in error and "required property name" in error


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_pod_meets_pod_security_restricted(overlay):
    spec = pod_spec(render(os.path.join(KUSTOMIZE, "overlays", overlay)))
    pod = spec["securityContext"]
    assert pod["runAsNonRoot"] is True and pod["runAsUser"] == 10001
    assert pod["seccompProfile"]["type"] == "RuntimeDefault"
    assert not spec.get("hostNetwork") and not spec.get("hostPID") and not spec.get("hostIPC")
    assert all("hostPath" not in v for v in spec["volumes"])
    for c in spec.get("initContainers", []) + spec["containers"]:
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False, c["name"]
        assert sc["capabilities"]["drop"] == ["ALL"] and "add" not in sc["capabilities"]
        assert sc["readOnlyRootFilesystem"] is True and not sc.get("privileged")
        assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
    # The image runs as the same number (docker/Dockerfile), so runAsNonRoot holds.
    assert "\nUSER 10001:10001\n" in open(os.path.join(ROOT, "docker", "Dockerfile")).read()


def test_native_sidecar_starts_before_the_app_and_stops_after_it():
    spec = pod_spec(render(os.path.join(KUSTOMIZE, "overlays", "native-sidecar")))
    (proxy,) = spec["initContainers"]
    assert proxy["name"] == "idemproxy" and proxy["restartPolicy"] == "Always"
    assert proxy["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert [c["name"] for c in spec["containers"]] == ["orders"]
    assert proxy["image"] == "registry.example.com/idemproxy:0.1.0"


def test_classic_sidecar_drains_after_a_pre_stop_pause():
    spec = pod_spec(render(os.path.join(KUSTOMIZE, "overlays", "classic-sidecar")))
    assert "initContainers" not in spec
    proxy = sidecar(spec)
    assert "restartPolicy" not in proxy
    command = proxy["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep"
    config = yaml.safe_load(by_kind(render(os.path.join(KUSTOMIZE, "overlays",
                                                        "classic-sidecar")))
                            ["ConfigMap"]["data"]["idemproxy.yaml"])
    drain = int(config["server"]["drain_timeout"].rstrip("s"))
    assert spec["terminationGracePeriodSeconds"] > int(command[1]) + drain


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_probes_ports_service_and_scraping_agree(overlay):
    objects = by_kind(render(os.path.join(KUSTOMIZE, "overlays", overlay)))
    spec = objects["Deployment"]["spec"]["template"]["spec"]
    proxy = sidecar(spec)
    ports = {p["name"]: p["containerPort"] for p in proxy["ports"]}
    assert proxy["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "admin"}
    assert proxy["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "admin"}
    assert objects["Service"]["spec"]["ports"][0]["targetPort"] == "proxy"
    config = yaml.safe_load(objects["ConfigMap"]["data"]["idemproxy.yaml"])
    assert config["listen"].endswith(":%d" % ports["proxy"])
    assert config["admin_listen"].endswith(":%d" % ports["admin"])
    notes = objects["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert notes["prometheus.io/scrape"] == "true"
    assert int(notes["prometheus.io/port"]) == ports["admin"]
    assert notes["prometheus.io/path"] == "/metrics"
    selector = objects["Deployment"]["spec"]["selector"]["matchLabels"]
    assert objects["Service"]["spec"]["selector"] == selector


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_embedded_config_passes_check_config_with_the_secrets_values(overlay, tmp_path):
    objects = by_kind(render(os.path.join(KUSTOMIZE, "overlays", overlay)))
    secret = objects["Secret"]["stringData"]
    proxy = sidecar(objects["Deployment"]["spec"]["template"]["spec"])
    env = {}
    for e in proxy["env"]:
        ref = e["valueFrom"]["secretKeyRef"]
        assert ref["name"] == objects["Secret"]["metadata"]["name"]
        env[e["name"]] = secret[ref["key"]]
    text = objects["ConfigMap"]["data"]["idemproxy.yaml"]
    key_file = yaml.safe_load(text)["store"]["encryption"]["key_file"]
    mounts = {m["name"]: m["mountPath"] for m in proxy["volumeMounts"]}
    assert os.path.dirname(key_file) == mounts["secrets"]
    (tmp_path / "keys").write_text(secret["encryption-keys"])
    path = tmp_path / "idemproxy.yaml"
    path.write_text(text.replace(key_file, str(tmp_path / "keys")))
    out = subprocess.run([BINARY, "check-config", "--config", str(path)], capture_output=True,
                         text=True, env=dict(os.environ, **env))
    assert out.returncode == 0, out.stderr
    assert mounts["config"] == "/etc/idemproxy" and proxy["args"][-1] == \
        "/etc/idemproxy/idemproxy.yaml"


def test_a_changed_config_renames_the_configmap_and_so_rolls_the_pods(tmp_path):
    copy = tmp_path / "kubernetes"
    shutil.copytree(KUSTOMIZE, copy)

    def configmap_names():
        objects = by_kind(render(str(copy / "overlays" / "native-sidecar")))
        volumes = objects["Deployment"]["spec"]["template"]["spec"]["volumes"]
        (used,) = [v["configMap"]["name"] for v in volumes if "configMap" in v]
        return objects["ConfigMap"]["metadata"]["name"], used

    before, used = configmap_names()
    assert before == used and re.match(r"^orders-idemproxy-[a-z0-9]{10}$", before)
    config = copy / "base" / "idemproxy.yaml"
    config.write_text(config.read_text().replace("ttl: 24h", "ttl: 48h"))
    after, used = configmap_names()
    assert after == used and after != before
