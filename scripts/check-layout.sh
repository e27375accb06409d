#!/usr/bin/env bash
# Checks the two layout rules of the C++ sources, and names each offender:
#   1. no source file (.cpp, .hpp, .h, .cc) in src/ or include/ is over 400 lines;
#   2. no include cycle between folders. A folder is the directory holding a file,
#      each directory its own node: src/store/pg is "store/pg", src/store is "store",
#      and include/idemproxy/X/... is folder X too (a public header belongs with its
#      implementation). Only `#include "..."` lines count; one resolves against the
#      including file's directory, then src/, then include/, and one that resolves to
#      no file here (a generated or system header) is left out.
# Exit 1 when either rule is broken, 0 otherwise.
#   bash scripts/check-layout.sh [--root DIR]   checks the tree at DIR (default: the checkout)
#   bash scripts/check-layout.sh --self-test    checks that a long file and a cycle fail
set -euo pipefail
exec python3 - "$(cd "$(dirname "$0")/.." && pwd)" "$@" <<'PY'
import os, re, subprocess, sys, tempfile

MAX_LINES = 400
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SOURCE = ('.cpp', '.hpp', '.h', '.cc')


def folder(root, path):
    rel = os.path.relpath(os.path.dirname(path), root).replace(os.sep, '/')
    for top in ('include/idemproxy', 'src', 'include'):
        if rel == top:
            return '.'
        if rel.startswith(top + '/'):
            return rel[len(top) + 1:]
    return rel


def check(root):
    files = []
    for top in ('src', 'include'):
        for d, _, names in os.walk(os.path.join(root, top)):
            files += [os.path.join(d, n) for n in sorted(names) if n.endswith(SOURCE)]
    problems = []
    edges = {}  # (from folder, to folder) -> one example "file: include"
    for f in sorted(files):
        with open(f, encoding='utf-8', errors='replace') as fh:
            lines = fh.read().splitlines()
        if len(lines) > MAX_LINES:
            problems.append(f'{os.path.relpath(f, root)}: {len(lines)} lines (over {MAX_LINES})')
        for line in lines:
            m = INCLUDE.match(line)
            if not m:
                continue
            for base in (os.path.dirname(f), os.path.join(root, 'src'), os.path.join(root, 'include')):
                target = os.path.normpath(os.path.join(base, m.group(1)))
                if os.path.isfile(target):
                    a, b = folder(root, f), folder(root, target)
                    if a != b:
                        edges.setdefault((a, b), f'{os.path.relpath(f, root)} includes "{m.group(1)}"')
                    break
    graph = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    # A folder is on a cycle when it can reach itself: report each strongly connected
    # group once, with the edges that tie it.
    def reach(start):
        seen, todo = set(), [start]
        while todo:
            for n in graph.get(todo.pop(), ()):
                if n not in seen:
                    seen.add(n)
                    todo.append(n)
        return seen
    reachable = {n: reach(n) for n in graph}
    done = set()
    for n in sorted(graph):
        if n in done or n not in reachable[n]:
            continue
        group = sorted(m for m in reachable[n] if n in reachable.get(m, ()))
        done.update(group)
        ties = [f'    {a} -> {b}: {edges[(a, b)]}' for (a, b) in sorted(edges)
                if a in group and b in group]
        problems.append(f'include cycle between folders {", ".join(group)}:\n' + '\n'.join(ties))
    return problems


def self_test(script):
    def run(tree):
        with tempfile.TemporaryDirectory() as root:
            for path, text in tree.items():
                os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
                with open(os.path.join(root, path), 'w') as fh:
                    fh.write(text)
            p = subprocess.run(['bash', script, '--root', root], capture_output=True, text=True)
            return p.returncode, p.stdout
    clean = {'src/a/x.cpp': '#include "b/y.hpp"\n#include <vector>\n', 'src/b/y.hpp': '#pragma once\n',
             'include/idemproxy/b/z.hpp': '#pragma once\n', 'src/b/y.cpp': '#include "idemproxy/b/z.hpp"\n'}
    bad = dict(clean)
    bad['src/b/long.cpp'] = 'int x;\n' * (MAX_LINES + 1)
    bad['include/idemproxy/b/w.hpp'] = '#include "a/x.hpp"\n'  # b -> a, and a -> b above
    bad['src/a/x.hpp'] = '#pragma once\n'
    failures = []
    rc, out = run(clean)
    if rc != 0:
        failures.append(f'a clean tree failed ({rc}):\n{out}')
    rc, out = run(bad)
    if rc != 1 or 'src/b/long.cpp: 401 lines' not in out or 'between folders a, b' not in out:
        failures.append(f'a long file and a cycle were not both named ({rc}):\n{out}')
    rc, out = run({'src/c/ok.cpp': 'int x;\n' * MAX_LINES})
    if rc != 0:
        failures.append(f'a file of exactly {MAX_LINES} lines failed:\n{out}')
    for f in failures:
        print('layout self-test: ' + f)
    print('layout self-test: ' + ('failed' if failures else 'passed'))
    return 1 if failures else 0


def main():
    checkout, args = sys.argv[1], sys.argv[2:]
    if args == ['--self-test']:
        return self_test(os.path.join(checkout, 'scripts', 'check-layout.sh'))
    root = args[1] if len(args) == 2 and args[0] == '--root' else checkout
    if args and not (len(args) == 2 and args[0] == '--root'):
        print('usage: check-layout.sh [--root DIR | --self-test]')
        return 2
    problems = check(root)
    for p in problems:
        print('layout: ' + p)
    print('layout: ' + (f'{len(problems)} problem(s)' if problems else
                        f'no file over {MAX_LINES} lines, no include cycle between folders'))
    return 1 if problems else 0


sys.exit(main())
PY
