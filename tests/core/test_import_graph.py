"""hvdlite's own modules import each other without a circle (every import counts, those inside functions too), and
the launcher's side imports nothing that loads the native core or starts MPI."""
import ast
import os
import subprocess
import sys

import hvdlite
from harness.processes import ROOT

PACKAGE_DIR = os.path.dirname(os.path.abspath(hvdlite.__file__))


# Where each package's modules live in this checkout: hvdlite/, the adapters installed as hvdlite.torch, ... (the
# wheel's mapping in pyproject.toml), and the benchmarks, which import each other by their bare names.
PACKAGE_ROOTS = {"hvdlite": PACKAGE_DIR,
                 **{f"hvdlite.{framework}": os.path.join(ROOT, "frameworks", framework)
                    for framework in ("torch", "tensorflow", "keras")},
                 "": os.path.join(ROOT, "bench")}


def modules():
    """{module name: path} of every module of the hvdlite package, its adapters and the benchmarks."""
    found = {}
    for package, top in PACKAGE_ROOTS.items():
        for folder, _, files in os.walk(top):
            for file in files:
                if file.endswith(".py"):
                    relative = os.path.relpath(os.path.join(folder, file), top)[:-3].replace(os.sep, ".")
                    name = ".".join(filter(None, [package, relative]))
                    found[name[:-len(".__init__")] if name.endswith(".__init__") else name] = os.path.join(folder, file)
    return found


def imported_modules(name, path, known):
    """The modules of ``known`` that the module ``name`` imports, anywhere in its code."""
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(open(path).read(), path)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            source = ".".join(filter(None, [base if node.level else "", node.module or ""]))
            # "from package import module" imports the module (its package is imported first anyway, as for every
            # import); "from module import name" the module.
            targets = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in known else source
                       for alias in node.names]
        else:
            continue
        found.update(target for target in targets if target in known and target != name)
    return found


def find_circle(graph):
    """One import circle of graph ({module: modules it imports}) as a list of modules, or None."""
    state = {}

    def visit(module, path):
        state[module] = "open"
        for imported in sorted(graph[module]):
            if state.get(imported) == "open":
                return path[path.index(imported):] + [imported]
            if imported not in state:
                circle = visit(imported, path + [imported])
                if circle:
                    return circle
        state[module] = "done"
        return None
    for module in sorted(graph):
        if module not in state:
            circle = visit(module, [module])
            if circle:
                return circle
    return None


EXTENSIONS = {"hvdlite._tensor_calls"}  # built from C (native/python/): imports nothing of hvdlite


def test_no_module_of_hvdlite_imports_itself_through_others():
    known = dict(modules(), **dict.fromkeys(EXTENSIONS, None))
    assert {"hvdlite.basics", "hvdlite.ops", "hvdlite.runner.job", "hvdlite.torch.async_ops",
            "hvdlite.tensorflow.mpi_ops", "fusion", "common"} <= set(known), sorted(known)
    graph = {name: imported_modules(name, path, known) if path else set() for name, path in known.items()}
    circle = find_circle(graph)
    assert circle is None, "import circle: " + " -> ".join(circle)


def test_the_benchmarks_import_the_tests_machinery_normally_and_hvdlite_never():
    """bench/ and tests/ share hvdlite.testing (simulated hosts, the core's threads): no benchmark puts tests/ on its
    path, and no module of hvdlite or its adapters imports the testing package."""
    known = modules()
    for name, path in known.items():
        source = open(path).read()
        if os.path.dirname(path) == os.path.join(ROOT, "bench"):
            assert '"tests"' not in source and "harness" not in source, f"{name} reaches into tests/"
        elif not name.startswith("hvdlite.testing"):
            assert "hvdlite.testing" not in imported_modules(name, path, known), f"{name} imports hvdlite.testing"


def test_the_circle_finder_finds_a_circle():
    """Checks our own logic (the finder above), not hvdlite: a made-up graph with a circle in it."""
    assert find_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_circle({"a": {"b"}, "b": set()}) is None


def test_the_launchers_side_neither_loads_the_native_core_nor_starts_mpi():
    code = ("import sys, hvdlite, hvdlite.runner, hvdlite.runner.__main__, hvdlite.runner.protocol, hvdlite.config; "
            "loaded = [m for m in ('mpi4py.MPI', 'hvdlite._native', 'hvdlite._tensor_calls') if m in sys.modules]; "
            "print(loaded); sys.exit(1 if loaded else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
