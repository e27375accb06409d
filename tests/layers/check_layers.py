#!/usr/bin/env python3
"""The layers the build enforces (CMakeLists.txt, idemproxy_library).

Each library compiles against a view of the tree that reaches only its own folders and
those of the layers below it. For every library, this preprocesses one file per folder
of the tree that includes a header of that folder, with the compiler and the include
directories the build gives that library, and checks that:
  - a header of a folder the library may reach is found;
  - a header of any other folder (a layer above, or beside) is not: the compiler stops
    with "No such file or directory" (GCC) or "file not found" (clang) for that very
    include.

  check_layers.py COMPILER SOURCE_DIR LIBRARY=FOLDER,FOLDER...=DIR|DIR... ...
Exit 0 when every case holds; 1, naming each case that does not, otherwise.
"""
import concurrent.futures
import os
import subprocess
import sys
import tempfile

compiler, root = sys.argv[1], sys.argv[2]
libraries = []
for arg in sys.argv[3:]:
    name, reach, dirs = arg.split('=', 2)
    libraries.append((name, set(reach.split(',')), [d for d in dirs.split('|') if d]))

# Every folder of the tree, each with the headers that stand for it: the first header
# (by name) in src/FOLDER and in include/idemproxy/FOLDER, as the sources include them.
folders = {}
for top, prefix in (('src', ''), ('include/idemproxy', 'idemproxy/')):
    base = os.path.join(root, top)
    for d, _, names in os.walk(base):
        rel = os.path.relpath(d, base).replace(os.sep, '/')
        headers = sorted(n for n in names if n.endswith('.hpp'))
        if rel == '.' or not headers:
            continue
        top_folder = rel.split('/')[0]
        folders.setdefault(top_folder, []).append(f'{prefix}{rel}/{headers[0]}')

work = tempfile.mkdtemp(prefix='layers-')


def case(library, reach, dirs, folder, header):
    probe = os.path.join(work, f'{library}-{header.replace("/", "_")}.cpp')
    with open(probe, 'w') as fh:
        fh.write(f'#include "{header}"\n')
    run = subprocess.run([compiler, '-std=c++20', '-E', '-o', os.devnull, probe] +
                         [f'-I{d}' for d in dirs], capture_output=True, text=True)
    allowed = folder in reach
    if allowed and run.returncode != 0:
        first = (run.stderr.strip().splitlines() or ['(no message)'])[0]
        return f'{library} may include "{header}" ({folder}), but it failed: {first}'
    if not allowed:
        if run.returncode == 0:
            return f'{library} reached "{header}" ({folder}), a folder above or beside it'
        if (f'{header}: No such file or directory' not in run.stderr and
                f"'{header}' file not found" not in run.stderr):
            return f'{library} including "{header}" failed for another reason: {run.stderr[:300]}'
    return None


cases = [(lib, reach, dirs, folder, header) for lib, reach, dirs in libraries
         for folder, headers in sorted(folders.items()) for header in headers]
with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
    problems = [p for p in pool.map(lambda c: case(*c), cases) if p]
refused = sum(1 for lib, reach, _, folder, _ in cases if folder not in reach)
for p in problems:
    print(p)
print(f'layers: {len(cases)} includes tried over {len(libraries)} libraries, '
      f'{refused} of them going up or sideways; {len(problems)} wrong')
sys.exit(1 if problems or not refused else 0)
