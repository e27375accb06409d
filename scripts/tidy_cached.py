#!/usr/bin/env python3
"""clang-tidy over src/, with the verdicts of clean files kept between runs.

clang-tidy checks a unity batch (cmake/build_speed.cmake) as one translation unit:
most of its time goes to the Asio, Beast and standard headers every source reaches,
whose declarations each check walks, and a batch walks them once for up to 10 sources
(src/proxy/flow.cpp alone took 38 s of CPU, its batch of 7 sources 41 s). Its
sources are "headers" of the batch, inside the HeaderFilterRegex, so their findings
are reported with their own paths.

Most runs change a few files. A batch's (or a file's) verdict depends only on what
the compiler sees, clang-tidy's version and .clang-tidy. What the compiler sees is the
file, every project file it reaches by a quoted #include (each followed whatever #if
surrounds it: more files than needed, never fewer; comments count, a NOLINT is one),
its flags, and the system headers, which change only with their packages (the
versions of every installed -dev package, the compilers and clang-tidy). A file whose
fingerprint over all that is one an earlier run found clean is not checked again.
Only clean verdicts are kept: a file with a finding is checked every time.

Usage: tidy_cached.py BUILD_DIR SRC_DIR LOG [REGEX: only the sources it matches; a
batch is checked when one of its sources matches]
Prints "checked N, clean from the cache M"; writes clang-tidy's output to LOG. The
cache is $IDEMPROXY_TIDY_CACHE, or ~/.cache/idemproxy-tidy (ccache's neighbour).
"""
import concurrent.futures
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys

EXTRA = "-extra-arg=-Wno-unknown-warning-option"  # the commands carry GCC's own flags


INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)


def checker_identity(root):
    version = subprocess.run(["clang-tidy", "--version"], capture_output=True, text=True).stdout
    packages = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Package}=${Version}\\n", "*-dev", "g++*", "gcc*",
         "clang-tidy*", "libclang*"], capture_output=True, text=True).stdout
    with open(os.path.join(root, ".clang-tidy"), "rb") as f:
        config = f.read()
    h = hashlib.sha256()
    for part in (version, "".join(sorted(packages.splitlines(True))), EXTRA):
        h.update(part.encode() + b"\0")
    h.update(config)
    return h.hexdigest()


def project_files(source, include_dirs, root):
    """The source and every file of the checkout its quoted includes reach."""
    seen, todo = {}, [os.path.realpath(source)]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        with open(path, "rb") as f:
            seen[path] = f.read()
        for name in INCLUDE.findall(seen[path]):
            name = name.decode()
            for d in [os.path.dirname(path)] + include_dirs:
                candidate = os.path.join(d, name)
                if os.path.isfile(candidate):
                    real = os.path.realpath(candidate)
                    if real.startswith(root + "/"):
                        todo.append(real)
                    break
    return seen


def sources(entry, build):
    """The sources an entry compiles: a unity batch's included files, or its own."""
    path = os.path.realpath(os.path.join(entry["directory"], entry["file"]))
    if not path.startswith(os.path.realpath(os.path.join(build, "unity")) + "/"):
        return [path]
    with open(path, "rb") as f:
        names = INCLUDE.findall(f.read())
    return [os.path.realpath(os.path.join(os.path.dirname(path), n.decode())) for n in names]


# A path through a batch's directory ("build-tidy/unity/../../src/x.cpp"), as clang-tidy
# names a batch's source in its findings.
THROUGH_BATCH = re.compile(r"[^\s:]*/unity/(?:\.\./)+[^\s:]*")


def fingerprint(entry, root, identity):
    source = entry["file"]
    args = shlex.split(entry["command"])
    include_dirs = [a[2:] for a in args if a.startswith("-I")]
    include_dirs = [d if os.path.isabs(d) else os.path.join(entry["directory"], d)
                    for d in include_dirs]
    # The flags but the output, the include paths (their effect is in which files are
    # reached) and the checkout's own path: a fresh clone elsewhere reuses them.
    flags = []
    skip = False
    for a in args[1:]:
        if skip:
            skip = False
        elif a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
        elif not a.startswith("-I") and a != source:
            flags.append(a.replace(root, "."))
    h = hashlib.sha256()
    for part in (identity, os.path.relpath(source, root), " ".join(flags)):
        h.update(part.encode() + b"\0")
    for path, text in sorted(project_files(source, include_dirs, root).items()):
        h.update(os.path.relpath(path, root).encode() + b"\0")
        h.update(hashlib.sha256(text).digest())
    return h.hexdigest()


def main():
    build, src, log_path = sys.argv[1:4]
    root = os.path.realpath(os.path.dirname(os.path.abspath(src.rstrip("/"))))
    cache = os.environ.get("IDEMPROXY_TIDY_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "idemproxy-tidy")
    os.makedirs(cache, exist_ok=True)
    under = os.path.realpath(src).rstrip("/") + "/"
    # Each entry with its sources under SRC_DIR (a batch's read once); entries without.
    with open(os.path.join(build, "compile_commands.json")) as f:
        entries = [(e, [s for s in sources(e, build) if s.startswith(under)])
                   for e in json.load(f)]
    entries = [(e, mine) for e, mine in entries if mine]
    if len(sys.argv) > 4:
        entries = [(e, mine) for e, mine in entries
                   if any(re.search(sys.argv[4], s) for s in mine)]
    identity = checker_identity(root)

    def check(entry):
        """clang-tidy's output for the entry; None when an earlier run found it clean."""
        key = fingerprint(entry, root, identity)
        if os.path.exists(os.path.join(cache, key)):
            return None
        run = subprocess.run(["clang-tidy", "-p", build, "-quiet", EXTRA, entry["file"]],
                             capture_output=True, text=True)
        output = THROUGH_BATCH.sub(lambda m: os.path.normpath(m.group(0)),
                                   "clang-tidy " + entry["file"] + "\n" + run.stdout + run.stderr)
        clean = run.returncode == 0 and ": warning: " not in output and ": error: " not in output
        if clean:
            with open(os.path.join(cache, key), "w"):
                pass
        return output

    # Counted in sources, a batch's as many as it has under SRC_DIR.
    checked = cached = 0
    with open(log_path, "w") as log, concurrent.futures.ThreadPoolExecutor(
            max_workers=int(os.environ.get("TIDY_JOBS", "2"))) as pool:
        for (_, mine), output in zip(entries, pool.map(check, [e for e, _ in entries])):
            if output is None:
                cached += len(mine)
            else:
                checked += len(mine)
                log.write(output + "\n")
    print("checked %d, clean from the cache %d" % (checked, cached))


if __name__ == "__main__":
    main()
