"""The package's rules, checked on its source: layers import one way, no private names cross
modules, function-level imports only for optional dependencies (and the package roots' lazy
names), at most 8 top-level modules, and simcore never imports simllm (docs/architecture.md says
why)."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "bindings" / "simllm"

#: Layer of each part of simllm: a module may import its own layer's siblings within one subpackage
#: and any lower layer. analysis, search and calibration are side by side and independent, as are
#: formats and report's text.
LAYERS = {
    "errors": 0, "fileio": 1, "text": 1,
    "config": 2,
    "sim": 3,
    "analysis": 4, "search": 4, "calibration": 4,
    "formats": 5, "report": 6,
    "cli": 7, "__init__": 8, "__main__": 8,
}
OPTIONAL = {"matplotlib", "pyarrow", "pandas", "torch", "dask", "distributed", "scipy", "fcntl"}  # fcntl: POSIX
#: The one function-level import that is not for an optional dependency, and why: the console
#: script settles the kernel mode (simllm.sim.kernelmode.choose) before simcore's decorators read it.
DEFERRED = {("bindings/simllm/cli/__init__.py", "simllm.cli")}


def modules():
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG)
        yield path, rel.parts[0].removesuffix(".py")


def imports(tree):
    """(node, module name, imported names, at module level) of every import in ``tree``."""
    top = {id(n) for n in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node, node.module, [a.name for a in node.names], id(node) in top
        elif isinstance(node, ast.Import):
            for a in node.names:
                yield node, a.name, [], id(node) in top


def part_of(module):
    """The part of simllm (key of LAYERS) a dotted module name belongs to, or None."""
    parts = module.split(".")
    if parts[0] != "simllm" or len(parts) < 2:
        return None
    return parts[1]


def test_at_most_8_top_level_modules():
    top = [p.name for p in PKG.glob("*.py") if p.name not in ("__init__.py", "__main__.py")]
    assert len(top) <= 8, top


def test_every_part_has_a_layer_and_a_docstring():
    for path, part in modules():
        assert part in LAYERS, f"{path}: no layer for {part!r} in tests/test_architecture.py"
    for sub in PKG.iterdir():
        if (sub / "__init__.py").exists():
            doc = ast.get_docstring(ast.parse((sub / "__init__.py").read_text()))
            assert doc and "May import" in doc, f"{sub.name}/__init__.py must say what it owns and may import"


def test_layers_import_one_way():
    bad = []
    for path, part in modules():
        for node, mod, names, _ in imports(ast.parse(path.read_text())):
            targets = [mod] if mod != "simllm" else [f"simllm.{n}" for n in names]
            for t in targets:
                other = part_of(t)
                if other is None or other == part or part in ("__init__", "__main__"):
                    continue
                if other not in LAYERS:  # a name re-exported by simllm/__init__
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {t} through the package root")
                elif LAYERS[other] >= LAYERS[part]:
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno} ({part}) imports {t} ({other})")
    assert not bad, "\n".join(bad)


def test_no_private_names_across_modules():
    bad = []
    for path, _ in modules():
        for node, mod, names, _ in imports(ast.parse(path.read_text())):
            if mod.startswith("simllm") or mod.startswith("simcore"):
                bad += [f"{path.relative_to(ROOT)}:{node.lineno} {mod}.{n}" for n in names
                        if n.startswith("_") and not n.startswith("__")]
                if isinstance(node, ast.ImportFrom):  # nor a public name renamed private
                    bad += [f"{path.relative_to(ROOT)}:{node.lineno} {mod}.{a.name} as {a.asname}" for a in node.names
                            if a.asname and a.asname.startswith("_")]
    assert not bad, "\n".join(bad)


def test_function_level_imports_only_for_optional_dependencies():
    bad = []
    for path, _ in modules():
        for node, mod, _, at_top in imports(ast.parse(path.read_text())):
            if not at_top and mod.split(".")[0] not in OPTIONAL and (str(path.relative_to(ROOT)), mod) not in DEFERRED:
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {mod} inside a function")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("path", sorted((ROOT / "simcore").rglob("*.py")), ids=lambda p: p.name)
def test_simcore_never_imports_simllm(path):
    for _, mod, _, _ in imports(ast.parse(path.read_text())):
        assert not mod.startswith("simllm"), f"{path.name} imports {mod}"


def test_only_the_package_roots_and_optional_imports_import_by_name():
    """``importlib.import_module`` is a function-level import by another name: the package roots'
    lazy names (``simcore.lazy``), ``errors.optional_import`` and the kernel warm-up (which
    compiles functions named by module in the file an interpreted command wrote) are its only
    users."""
    allowed = {ROOT / "simcore" / "lazy.py", PKG / "errors.py", PKG / "sim" / "warmup.py"}
    paths = [*PKG.rglob("*.py"), *(ROOT / "simcore").rglob("*.py")]
    bad = [str(p.relative_to(ROOT)) for p in paths if "import_module(" in p.read_text() and p not in allowed]
    assert not bad, bad


def test_import_simllm_leaves_numba_for_the_first_simulation():
    """``import simllm`` (and the configuration layer) imports no numba; every public name of
    simllm and simcore resolves on first read, numba with it, and is the defining module's object."""
    script = (
        "import sys, importlib\n"
        "import simllm, simllm.config.workload\n"
        "assert 'numba' not in sys.modules, 'import simllm imported numba'\n"
        "simllm.load_model('llama-3.1-8b'); simllm.load_hardware('h100-sxm')\n"
        "assert 'numba' not in sys.modules, 'loading configs imported numba'\n"
        "import simcore\n"
        "assert 'numba' not in sys.modules, 'import simcore imported numba'\n"
        "for pkg in (simllm, simcore):\n"
        "    assert set(pkg.__all__) <= set(dir(pkg))\n"
        "    for name in pkg.__all__:\n"
        "        value = getattr(pkg, name)\n"
        "        home = pkg._HOME_OF.get(name)\n"
        "        assert home is None or getattr(importlib.import_module(home), name) is value, name\n"
        "assert 'numba' in sys.modules\n"
        "from simllm import simulate, SimResult\n"
        "assert simulate.__module__ == 'simllm.sim.simulate' and SimResult.__module__ == 'simllm.sim.results'\n"
        "for pkg in (simllm, simcore):\n"
        "    try:\n"
        "        pkg.no_such_name\n"
        "    except AttributeError as e:\n"
        "        assert 'no_such_name' in str(e)\n"
        "    else:\n"
        "        raise AssertionError(pkg)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
