"""The README is a door and the docs site is built from the code: README.md at most 200 lines,
opening with the two commands; every link in it and in docs/ resolves; every page in mkdocs.yml's
nav exists or is generated; the generated command-line reference holds every subcommand's every
option and the preset pages every shipped preset with its sourced figures. The site build itself
(``mkdocs build --strict``) runs behind the heavy marker and in CI."""
import importlib.util
import re
import subprocess
import sys

import pytest
import yaml

from helpers import ROOT
from simllm.config import catalog, presets

DOCS = ROOT / "docs"
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")
GENERATED = {"reference/cli.md", "reference/api.md", *(f"presets/{kind}.md" for kind in presets.KINDS)}


def hook():
    """docs/hooks/generate.py as a module (it needs mkdocs)."""
    pytest.importorskip("mkdocs")
    spec = importlib.util.spec_from_file_location("docs_generate", DOCS / "hooks" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_is_a_door():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, len(lines)
    assert lines[:6] == ["# simllm", "", "```bash", "pip install . && simllm run",
                         'pip install -e ".[test]" && python -m pytest', "```"]
    text = "\n".join(lines)
    counts = re.search(r"(\d+) models, (\d+) GPUs, (\d+) workloads", text)  # the presets paragraph
    assert counts and [int(n) for n in counts.groups()] == [len(presets.preset_names(k)) for k in
                                                             ("models", "hardware", "workloads")]
    for section in ("## Accuracy", "## Performance", "silicon_sample.csv", "client_overhead_ms", "aiconfigurator-core"):
        assert section in text, section


@pytest.mark.parametrize("page", ["README.md", *sorted(str(p.relative_to(ROOT)) for p in DOCS.rglob("*.md"))])
def test_relative_links_resolve(page):
    path = ROOT / page
    for target, _ in LINK.findall(path.read_text(encoding="utf-8")):
        if "://" in target or target.startswith("mailto:"):
            continue
        resolved = (path.parent / target).resolve()
        generated = resolved.is_relative_to(DOCS) and str(resolved.relative_to(DOCS)) in GENERATED
        assert resolved.exists() or generated, f"{page}: {target}"


def test_every_nav_page_exists_or_is_generated():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))

    def pages(node):
        if isinstance(node, str):
            yield node
        elif isinstance(node, dict):
            for value in node.values():
                yield from pages(value)
        elif isinstance(node, list):
            for value in node:
                yield from pages(value)

    nav = set(pages(config["nav"]))
    assert GENERATED <= nav
    for page in nav - GENERATED:
        assert (DOCS / page).is_file(), page
    written = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md") if "hooks" not in p.parts}
    assert written <= nav, written - nav  # no page left out of the nav


def test_cli_reference_has_every_option_of_every_subcommand():
    from simllm.cli.app import build_parser

    generate = hook()
    page = generate.cli_page()
    commands = list(generate.subcommands(build_parser()))
    names = [name for name, _, _ in commands]
    assert "simllm run" in names and "simllm kernels import" in names and len(names) >= 14
    for name, command, _ in commands:
        assert f"## {name}\n" in page and f"usage: {name}" in page, name
        for action in command._actions:
            for flag in action.option_strings:
                assert flag in page.split(f"## {name}\n")[1].split("\n## ")[0], (name, flag)


@pytest.mark.parametrize("kind", presets.KINDS)
def test_preset_pages_list_every_preset_with_its_sources(kind):
    page = hook().preset_page(kind)
    for info in catalog.describe_presets(kind):
        assert f"\n## {info.name}\n" in page, info.name
        for fig in info.figures:
            assert f"| `{fig.key}` | " in page
    h100 = catalog.describe_preset("hardware", "h100-sxm")
    if kind == "hardware":
        section = page.split("\n## h100-sxm\n")[1].split("\n## ")[0]
        assert "| `memory_bandwidth_gbps` | 3,350 | \\[2\\] 3.35 TB/s |" in section
        assert "<https://www.nvidia.com/en-us/data-center/h100/>" in section
        assert len([r for r in h100.references if r[0].startswith("[")]) == section.count("\n- \\[")


def test_api_reference_names_every_public_name():
    import simllm

    page = hook().api_page()
    for name in simllm.__all__:
        if name != "__version__":
            assert re.search(rf"^::: simllm\.[\w.]+\.{name}$", page, re.M), name


@pytest.mark.heavy
@pytest.mark.slow
def test_mkdocs_build_strict(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    pytest.importorskip("material")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (tmp_path / "site" / "reference" / "cli" / "index.html").is_file()
    assert "h100-sxm" in (tmp_path / "site" / "presets" / "hardware" / "index.html").read_text(encoding="utf-8")


def commands(text):
    """Every ``simllm ...`` command line in ``text``'s bash blocks, continuations joined, comments dropped."""
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" # ")[0].strip()
            if line.startswith("simllm "):
                yield line


@pytest.mark.parametrize("page", ["README.md", *sorted(str(p.relative_to(ROOT)) for p in DOCS.rglob("*.md"))])
def test_every_documented_command_parses(page):
    """Each example command is one the parser takes (flags, choices, value types), so a renamed or
    removed flag breaks this test rather than a reader's first try."""
    import shlex

    from simllm.cli.app import build_parser

    for line in commands((ROOT / page).read_text(encoding="utf-8")):
        argv = shlex.split(line)[1:]
        if "$" in line:  # a shell variable stands for a path
            argv = [a.replace("$D", "data.csv").replace("$F", "x") for a in argv]
        try:
            build_parser().parse_args(argv)
        except SystemExit as exc:
            pytest.fail(f"{page}: `{line}` exits {exc.code}")
