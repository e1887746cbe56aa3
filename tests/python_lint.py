"""Every Python file of the project is clean under pyflakes (no undefined name, no unused import),
and where one imports another of the project's own modules (a benchmark importing a test's cluster,
a test its helpers), every name it takes from that module exists there: the benchmarks are not run
by the suite, so a helper moved out of a test module would otherwise break them unnoticed.

    python_lint.py SOURCE_DIR
"""
import ast
import os
import subprocess
import sys

SKIP = {".git", "build", "__pycache__"}


def python_files(root):
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP and not d.startswith("build"))
        yield from (os.path.join(folder, f) for f in sorted(files) if f.endswith(".py"))


def defined_names(path):
    """The names a module defines at its top level (functions, classes, assignments, imports)."""
    names = set()
    for node in ast.parse(open(path).read(), path).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


def missing_names(path, modules):
    """'<file>:<line>: <module>.<name>' for each name `path` takes from one of `modules` (the
    project's, by module name) that the module does not define."""
    tree = ast.parse(open(path).read(), path)
    aliases, found = {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in modules:
                    aliases[a.asname or a.name] = a.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in modules:
            for a in node.names:
                if a.name != "*" and a.name not in modules[node.module]:
                    found.append(f"{path}:{node.lineno}: {node.module}.{a.name}")
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and node.attr not in modules[aliases[node.value.id]]):
            found.append(f"{path}:{node.lineno}: {aliases[node.value.id]}.{node.attr}")
    return found


def main():
    root = sys.argv[1]
    files = list(python_files(root))
    assert len(files) > 50, files  # the walk found the project
    r = subprocess.run([sys.executable, "-m", "pyflakes", *files], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    # The project's modules that others import by name: those in a folder that some file puts on
    # sys.path (the tests' helpers, the benchmarks, the Python package's tests), by file name.
    # Where two files share a name (a test's worker and a benchmark's), neither is checked.
    modules, seen = {}, {}
    for path in files:
        name = os.path.basename(path)[:-3]
        seen[name] = seen.get(name, 0) + 1
        modules[name] = path
    modules = {n: defined_names(p) for n, p in modules.items() if seen[n] == 1}
    missing = [m for path in files for m in missing_names(path, modules)]
    assert not missing, "names imported that their module does not define:\n" + "\n".join(missing)
    print(f"{len(files)} Python files: pyflakes clean, every name taken from the project's own "
          f"{len(modules)} modules defined there: passed")


if __name__ == "__main__":
    main()
