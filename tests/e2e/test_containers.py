"""The container files as text: the compose file is shaped right, the shipped configs
pass check-config, the Dockerfile's layers are ordered for the cache, and the image's
runtime packages provide every library the binary links. test_image.py builds and
runs the image itself."""
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
    assert proxy["healthcheck"]["test"][1] == "bash"  # the image has no curl
    assert proxy["environment"]["IDEMPROXY_PG_DSN"].startswith("postgresql://")
    mounted = services["upstream"]["volumes"][0].split(":")[0]
    assert os.path.exists(os.path.normpath(os.path.join(DOCKER, mounted)))


def test_shipped_configs_pass_check_config(tmp_path):
    for name in ("idemproxy.yaml", "memory.yaml"):
        text = open(os.path.join(ROOT, "config", name)).read()
        out = check_config_text(tmp_path, text, {"IDEMPROXY_PG_DSN": "postgresql://u@h/db"})
        assert out.returncode == 0, (name, out.stderr)


def dockerfile():
    return open(os.path.join(DOCKER, "Dockerfile")).read()


def stages():
    """The Dockerfile's stages by name; the last, unnamed one, as "final"."""
    found = {}
    for part in re.split(r"\n(?=FROM )", dockerfile())[1:]:
        head = part.splitlines()[0].split()
        found[head[3] if len(head) > 3 else "final"] = part
    return found


def test_dockerfile_builds_with_the_projects_own_scripts_in_cache_friendly_layers():
    text, found = dockerfile(), stages()
    assert text.startswith("#") and list(found) == ["build", "runtime", "prebuilt", "final"]
    build = found["build"]
    assert build.startswith("FROM debian:bookworm-slim AS build")
    # The toolchain layer comes before any source is copied in.
    steps = [l for l in build.splitlines() if l.startswith(("COPY", "RUN"))]
    assert steps[:2] == ["COPY scripts/install-deps.sh scripts/install-deps.sh",
                         "RUN bash scripts/install-deps.sh build"]
    assert steps.index("COPY src src") > 1 and "cpack -G DEB" in build
    # The compile keeps its ccache between builds.
    assert "RUN --mount=type=cache,target=/root/.cache/ccache" in build
    # No stage is named through a build argument: buildah (podman) would read it as
    # an image name ("short-name did not resolve").
    assert not re.search(r"^FROM \S*\$", text, re.M)
    # The runtime libraries come before the package, which changes with every edit;
    # the default stage installs the build stage's package, "prebuilt" the context's.
    runtime = found["runtime"]
    assert runtime.startswith("FROM debian:bookworm-slim AS runtime")
    assert "apt-get install" in runtime and "dpkg -i" not in runtime
    assert found["prebuilt"].startswith("FROM runtime AS prebuilt")
    assert "COPY .image/idemproxy.deb /tmp/idemproxy.deb" in found["prebuilt"]
    assert found["final"].startswith("FROM runtime\n")
    assert "COPY --from=build /idemproxy.deb /tmp/idemproxy.deb" in found["final"]
    for label in ("title", "source", "licenses"):
        assert "org.opencontainers.image.%s=" % label in runtime
    for name in ("prebuilt", "final"):
        stage = found[name]
        instructions = [l for l in stage.splitlines() if not l.startswith("#")]
        assert instructions[-1] == "USER 10001:10001"
        # The labels naming the build come after the package, and their arguments
        # before it: buildah would reuse a cached LABEL layer from a build with other
        # arguments if no RUN step between saw them.
        assert (stage.index("ARG IDEMPROXY_REVISION") < stage.index("RUN dpkg -i")
                < stage.index("image.version="))
        assert "org.opencontainers.image.revision=" in stage
    instructions = [l for l in text.splitlines() if not l.startswith("#")]
    assert not any(l.startswith("HEALTHCHECK") or "curl" in l for l in instructions)


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
    runtime_stage = stages()["runtime"]
    install = runtime_stage[runtime_stage.index("apt-get install"):runtime_stage.index("&& rm -rf")]
    listed = set(re.findall(r"\b(lib[\w.+-]+|ca-certificates)\b", install))
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


def test_the_release_binary_allocates_with_tcmalloc():
    """The proxy links tcmalloc (IDEMPROXY_TCMALLOC): glibc's malloc was 15% of a fresh
    key's CPU, and tcmalloc gave 0.80 x the CPU per fresh key (docs/PERFORMANCE.md)."""
    ldd = subprocess.run(["ldd", RELEASE_BINARY], capture_output=True, text=True,
                         check=True).stdout
    assert "libtcmalloc_minimal.so.4 => /" in ldd, ldd
    # The symbol the process calls is tcmalloc's, not glibc's: tcmalloc's own
    # entry point answers through the dynamic linker.
    probe = subprocess.run(["bash", "-c", "LD_DEBUG=bindings %s --version 2>&1 >/dev/null"
                            " | grep -m1 \"normal symbol \\`malloc'\"" % RELEASE_BINARY],
                           capture_output=True, text=True)
    assert "libtcmalloc_minimal" in probe.stdout, probe.stdout
