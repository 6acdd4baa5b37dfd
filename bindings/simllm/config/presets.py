"""Finding configuration files: a preset name (``llama-3.1-8b``) or a path."""
import difflib
import functools
from pathlib import Path

from simllm.errors import ConfigError

KINDS = ("models", "hardware", "workloads", "frameworks")


@functools.lru_cache(maxsize=1)
def configs_dir():
    """The directory holding the shipped presets: ``simllm/configs`` when installed from a wheel
    (package data), ``configs/`` at the root of a source checkout or editable install."""
    package = Path(__file__).resolve().parents[1]  # simllm/ (this file is simllm/config/presets.py)
    installed = package / "configs"
    return installed if installed.is_dir() else package.parent.parent / "configs"


def _key(name):
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def preset_names(kind):
    """Sorted preset names of ``kind`` (``"models"``, ``"hardware"``, ``"workloads"`` or ``"frameworks"``)."""
    folder = configs_dir() / kind
    return sorted(p.stem for p in folder.glob("*.yaml"))


def resolve(kind, name_or_path, *, flag):
    """Path of the config named by ``name_or_path``: an existing file or directory, else a preset.

    Raises
    ------
    ConfigError
        Naming ``flag`` and suggesting the nearest preset names when nothing matches.
    """
    text = str(name_or_path)
    path = Path(text).expanduser()
    if path.exists():
        if path.is_dir():
            if (path / "config.json").is_file():
                return path / "config.json"
            raise ConfigError(
                "a YAML file, a config.json, or a directory containing config.json",
                source="command line", key=flag, value=text,
            )
        return path
    wanted = _key(path.stem if path.suffix in (".yaml", ".yml", ".json") else text)
    direct = configs_dir() / kind / f"{wanted}.yaml"  # presets are named by their key: no listing
    if not any(sep in wanted for sep in "/\\") and direct.is_file():
        return direct
    names = preset_names(kind)
    for name in names:
        if _key(name) == wanted:
            return configs_dir() / kind / f"{name}.yaml"
    looks_like_path = any(sep in text for sep in "/\\") or path.suffix in (".yaml", ".yml", ".json")
    near = difflib.get_close_matches(wanted, names, n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(near)}? " if near else ""
    what = "an existing file" if looks_like_path else f"a {kind[:-1] if kind != 'hardware' else 'hardware'} preset"
    raise ConfigError(
        f"{what} ({hint}presets: {', '.join(names)}; or a path to a file)",
        source="command line", key=flag, value=text,
    )
