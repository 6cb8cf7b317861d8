"""The Python package's layout, as tests/layout.rs holds the Rust tree's: no import circle, every
import of the package's own modules at the top of its file (none inside a function to dodge a
circle), no private name or private attribute of one module used in another, the recorder never
importing the binary's workers (``_workers``), and files under 600 lines."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "memscope"


def modules():
    """Dotted name (``memscope._workers.engine``) → parsed file, for every module."""
    out = {}
    for f in sorted(PACKAGE.rglob("*.py")):
        parts = list(f.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = (f, ast.parse(f.read_text(), str(f)))
    return out


# The compiled module (PyO3): a module, though not a Python file.
EXTENSIONS = {"memscope._native"}


def package_of(name, path):
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def imported(name, path, node, known):
    """The package's own modules ``node`` imports, with the names it takes from each."""
    if isinstance(node, ast.Import):
        return [(a.name, None) for a in node.names if a.name.split(".")[0] == "memscope"]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        base = package_of(name, path)
        for _ in range(node.level - 1):
            base = base.rpartition(".")[0]
        target = f"{base}.{node.module}" if node.module else base
    elif (node.module or "").split(".")[0] == "memscope":
        target = node.module
    else:
        return []
    out = []
    for a in node.names:
        sub = f"{target}.{a.name}"
        out.append((sub, None) if sub in known or sub in EXTENSIONS else (target, a.name))
    return out


def edges():
    mods = modules()
    out = []
    for name, (path, tree) in mods.items():
        top = set(map(id, tree.body))
        for node in ast.walk(tree):
            for target, taken in imported(name, path, node, mods):
                out.append((name, target, taken, id(node) in top, node.lineno))
    return mods, out


def test_no_import_circle_and_the_recorder_never_imports_the_workers():
    mods, es = edges()
    graph = {m: set() for m in mods}
    for a, b, _, _, _ in es:
        if b in mods and b != a and not a.startswith(b + "."):
            graph[a].add(b)
    seen, on_path, circles = set(), [], []

    def visit(m):
        if m in on_path:
            circles.append(on_path[on_path.index(m):] + [m])
            return
        if m in seen:
            return
        seen.add(m)
        on_path.append(m)
        for n in sorted(graph[m]):
            visit(n)
        on_path.pop()
    for m in sorted(graph):
        visit(m)
    assert circles == [], circles
    up = [(a, b) for a, b, _, _, _ in es
          if ".memscope._workers" not in f".{a}" and "._workers" in f".{b}"]
    assert up == [], f"the recorder imports the binary's workers: {up}"


def test_every_own_import_is_at_the_top_and_takes_no_private_name():
    mods, es = edges()
    local = [f"{a}:{line} imports {b}" for a, b, _, top, line in es if not top]
    assert local == [], f"imports of the package's modules inside a function: {local}"
    private = [f"{a}:{line} takes {b}.{t}" for a, b, t, _, line in es
               if t is not None and t.startswith("_") and not t.startswith("__")]
    assert private == [], f"private names used outside their module: {private}"


def test_no_private_attribute_of_the_package_s_objects_is_used_outside_its_module():
    mods = modules()
    # The private attributes the package's classes set on themselves, by module.
    own = {}
    for name, (_, tree) in mods.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id == "self" and node.attr.startswith("_") \
                    and not node.attr.startswith("__"):
                own.setdefault(node.attr, set()).add(name)
    bad = []
    for name, (_, tree) in mods.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id not in ("self", "cls") and node.attr in own \
                    and name not in own[node.attr]:
                bad.append(f"{name}:{node.lineno} {node.value.id}.{node.attr}")
    assert bad == [], f"private attributes read outside the module that sets them: {bad}"


def test_files_stay_under_600_lines():
    long = [f"{p.relative_to(PACKAGE)}: {n}" for p, _ in modules().values()
            if (n := len(p.read_text().splitlines())) > 600
            and "over 600 lines because" not in p.read_text()[:2000]]
    assert long == [], long


def test_the_native_module_s_stub_declares_exactly_its_names():
    import memscope._native as native
    stub = ast.parse((PACKAGE / "_native.pyi").read_text())
    declared = {n.name for n in stub.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    declared |= {n.target.id for n in stub.body if isinstance(n, ast.AnnAssign)}
    actual = {n for n in dir(native) if not n.startswith("_")}
    assert declared == actual, (declared ^ actual)
    assert (PACKAGE / "py.typed").exists()
