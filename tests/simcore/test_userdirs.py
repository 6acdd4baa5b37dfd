"""Where numba caches simcore's kernels (simcore/userdirs.py, simcore/_jit.py): a per-user folder
keyed by the interpreter, numba's version and the sources' contents; ``NUMBA_CACHE_DIR`` wins;
nothing is ever written next to simcore's sources."""
import shutil
import sys
from pathlib import Path

import numba
import pytest

from simcore import userdirs
from simcore.userdirs import cache_key, kernel_cache_dir, source_digest, user_folder

HOME = Path("/home/ada")


@pytest.mark.parametrize("platform, environ, kind, expected", [
    ("linux", {}, "cache", HOME / ".cache/simllm"),
    ("linux", {}, "config", HOME / ".config/simllm"),
    ("linux", {"XDG_CACHE_HOME": "/x/cache", "XDG_CONFIG_HOME": "/x/conf"}, "cache", Path("/x/cache/simllm")),
    ("linux", {"XDG_CACHE_HOME": "/x/cache", "XDG_CONFIG_HOME": "/x/conf"}, "config", Path("/x/conf/simllm")),
    ("linux", {"XDG_CACHE_HOME": "relative/cache"}, "cache", HOME / ".cache/simllm"),  # the spec: ignored
    ("freebsd14", {}, "cache", HOME / ".cache/simllm"),
    ("darwin", {"XDG_CACHE_HOME": "/x/cache"}, "cache", HOME / "Library/Caches/simllm"),
    ("darwin", {}, "config", HOME / "Library/Application Support/simllm"),
    ("win32", {"LOCALAPPDATA": "/c/Users/ada/AppData/Local"}, "cache", Path("/c/Users/ada/AppData/Local/simllm")),
    ("win32", {}, "config", HOME / "AppData/Local/simllm"),
])
def test_user_folder_per_platform(platform, environ, kind, expected):
    assert user_folder(kind, environ=environ, platform=platform, home=HOME) == expected


def test_user_folder_rejects_an_unknown_kind():
    with pytest.raises(ValueError, match="cache"):
        user_folder("data", environ={}, platform="linux", home=HOME)


def test_kernel_cache_dir_is_keyed_under_the_user_cache_and_numba_cache_dir_wins():
    env = {"XDG_CACHE_HOME": "/x/cache"}
    path = kernel_cache_dir("0.68.1", environ=env, platform="linux", home=HOME)
    assert path.parent == Path("/x/cache/simllm/numba")
    assert path.name == cache_key("0.68.1")
    assert path.name.startswith(f"{sys.implementation.cache_tag}-numba0.68.1-")
    assert path.name.endswith(source_digest()[:userdirs.DIGEST_CHARS])
    assert kernel_cache_dir("0.69.0", environ=env, platform="linux", home=HOME) != path
    assert kernel_cache_dir("0.68.1", environ=dict(env, NUMBA_CACHE_DIR="/mine"), platform="linux",
                            home=HOME) == Path("/mine")


def _tree(root):
    (root / "fast").mkdir(parents=True)
    (root / "a.py").write_text("x = 1\n")
    (root / "fast" / "b.py").write_text("def f():\n    return 2\n")
    (root / "notes.txt").write_text("not source")
    return root


def test_the_key_follows_the_sources_contents_not_their_place(tmp_path):
    one, two = _tree(tmp_path / "one"), _tree(tmp_path / "elsewhere" / "two")
    assert source_digest(one) == source_digest(two)
    assert cache_key("0.68.1", one) == cache_key("0.68.1", two)
    (two / "notes.txt").write_text("changed, but not a source file")
    (two / "__pycache__").mkdir()
    (two / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    assert cache_key("0.68.1", one) == cache_key("0.68.1", two)
    (two / "fast" / "b.py").write_text("def f():\n    return 3\n")  # an edit in a subpackage
    assert cache_key("0.68.1", one) != cache_key("0.68.1", two)
    shutil.copy(one / "fast" / "b.py", two / "fast" / "b.py")
    assert cache_key("0.68.1", one) == cache_key("0.68.1", two)
    (two / "fast" / "c.py").write_text("")  # a new (even empty) file
    assert source_digest(one) != source_digest(two)
    (two / "fast" / "c.py").unlink()
    (two / "a.py").rename(two / "a2.py")  # a rename
    assert source_digest(one) != source_digest(two)


def test_simcores_own_key_covers_all_its_sources():
    import simcore

    root = Path(simcore.__file__).parent
    assert userdirs.SOURCE_DIR == root
    assert {"engine.py", "fast/cohort.py", "userdirs.py"} <= {p.relative_to(root).as_posix()
                                                               for p in root.rglob("*.py")}


@pytest.mark.skipif(numba.config.DISABLE_JIT, reason="numba's cache is what is checked")
def test_the_policy_caches_in_its_folder_and_leaves_numbas_setting_alone(tmp_path, monkeypatch):
    from simcore import _jit

    assert _jit.CACHE_DIR == kernel_cache_dir(numba.__version__)
    assert _jit.CACHING
    before = numba.config.CACHE_DIR
    monkeypatch.setattr(_jit, "CACHE_DIR", tmp_path / "kernels")

    def twice(x):
        return 2 * x

    twice_nb = _jit.jit(twice)
    assert numba.config.CACHE_DIR == before
    assert twice_nb(21) == 42
    written = {p.suffix for p in (tmp_path / "kernels").rglob("*") if p.is_file()}
    assert {".nbi", ".nbc"} <= written
    here = Path(__file__).parent / "__pycache__"
    assert not list(here.glob("test_userdirs.twice*.nb*"))


@pytest.mark.skipif(numba.config.DISABLE_JIT, reason="numba's cache is what is checked")
def test_every_kernel_caches_in_the_keyed_folder():
    import importlib
    import pkgutil

    import simcore
    from simcore import _jit

    cached = 0
    for info in pkgutil.walk_packages(simcore.__path__, "simcore."):
        for obj in vars(importlib.import_module(info.name)).values():
            if isinstance(obj, numba.core.registry.CPUDispatcher) and obj._cache is not None \
                    and type(obj._cache).__name__ == "FunctionCache":
                assert Path(obj._cache._cache_path).is_relative_to(_jit.CACHE_DIR), obj
                cached += 1
    assert cached > 60


def test_an_unwritable_folder_means_no_caching(tmp_path):
    from simcore import _jit

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert not _jit._caching_possible(blocker / "cache")
    assert _jit._caching_possible(tmp_path / "cache")


def test_no_writable_user_cache_turns_caching_off_and_writes_nothing_beside_the_sources(tmp_path):
    """A per-user cache folder that cannot be made (under a file) means no caching, not numba's
    fallback to ``__pycache__`` next to simcore; ``NUMBA_CACHE_DIR`` set to a writable folder wins."""
    import os
    import subprocess

    import simcore

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    probe = ("import simcore, simcore.memory, numba; "
             "print(simcore.CACHING, simcore.CACHE_DIR, numba.config.CACHE_DIR, sep='|')")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    root = Path(simcore.__file__).parents[1]
    off = subprocess.run([sys.executable, "-c", probe], env=dict(env, XDG_CACHE_HOME=str(blocker)), cwd=root,
                         capture_output=True, text=True, timeout=120)
    assert off.returncode == 0, off.stderr[-2000:]
    caching, folder, numbas = off.stdout.strip().split("|")
    assert caching == "False" and Path(folder).is_relative_to(blocker) and numbas == ""
    mine = subprocess.run([sys.executable, "-c", probe], env=dict(env, XDG_CACHE_HOME=str(blocker),
                                                                  NUMBA_CACHE_DIR=str(tmp_path / "nc")),
                          cwd=root, capture_output=True, text=True, timeout=120)
    assert mine.stdout.strip().split("|") == ["True", str(tmp_path / "nc"), str(tmp_path / "nc")], mine.stderr[-2000:]
    beside = [p for p in Path(simcore.__file__).parent.rglob("*") if p.suffix in (".nbi", ".nbc")]
    assert not beside, beside[:3]
