#!/usr/bin/env python3
"""The project's own C++ under clang 14 with the g++ build's flags (-Wall -Wextra): the front end
only (-fsyntax-only), every translation unit of BUILD/compile_commands.json outside third_party/
and the sources BUILD generates, in parallel; of a unity build (CMAKE_UNITY_BUILD), its unity
files, each including its target's sources. Prints each warning once and exits 1 on any:
scripts/test.sh runs it so that a new warning from either compiler fails the suite.
Usage: clang-warnings.py BUILD"""
import concurrent.futures
import json
import os
import shlex
import subprocess
import sys

build = os.path.abspath(sys.argv[1])
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GCC_ONLY = {"-Wno-subobject-linkage"}  # (its unity build's: CMakeLists.txt)
THEIRS = tuple(os.path.join(d, "third_party") + "/" for d in (root, build))
units = []
for entry in json.load(open(os.path.join(build, "compile_commands.json"))):
    path = os.path.abspath(os.path.join(entry["directory"], entry["file"]))
    generated = path.startswith(build + "/") and "/Unity/" not in path
    if generated or path.startswith(THEIRS):
        continue
    argv = shlex.split(entry["command"])
    if not argv[0].endswith(("c++", "g++")):
        continue  # (CUDA sources: nvcc's, not compiled by clang here)
    argv[0] = "clang++-14"
    argv = [a for a in argv if a not in GCC_ONLY]
    if "-o" in argv:
        del argv[argv.index("-o") : argv.index("-o") + 2]
    units.append((entry["directory"], argv + ["-fsyntax-only"]))


def check(unit):
    directory, argv = unit
    r = subprocess.run(argv, cwd=directory, capture_output=True, text=True)
    return r.returncode, r.stderr


warnings, failed = set(), False
with concurrent.futures.ThreadPoolExecutor(os.cpu_count()) as pool:
    for code, err in pool.map(check, units):
        failed |= code != 0
        warnings.update(line for line in err.splitlines() if "warning:" in line)
        if code != 0:
            print(err, file=sys.stderr)
for w in sorted(warnings):
    print(w, file=sys.stderr)
print(f"clang-warnings: {len(units)} translation units, {len(warnings)} warnings")
sys.exit(1 if warnings or failed else 0)
