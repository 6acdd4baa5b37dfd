"""Finding configuration files: a preset name (``llama-3.1-8b``) or a path; the user's own
configuration folder (profiles ``simllm calibrate`` writes, found by name before the shipped ones);
and the folders simllm never writes into (its installed package and the shipped presets)."""
import difflib
import functools
from pathlib import Path

from simcore.userdirs import SOURCE_DIR as SIMCORE_DIR
from simcore.userdirs import user_folder
from simllm.errors import CLI, ConfigError

KINDS = ("models", "hardware", "workloads", "frameworks")

#: Kinds whose names are looked up in :func:`user_configs_dir` before the shipped presets.
USER_KINDS = ("frameworks",)

#: The simllm package's own folder (``bindings/simllm`` in a source checkout).
PACKAGE_DIR = Path(__file__).resolve().parents[1]


@functools.lru_cache(maxsize=1)
def configs_dir():
    """The directory holding the shipped presets: ``simllm/configs`` when installed from a wheel
    (package data), ``configs/`` at the root of a source checkout or editable install."""
    installed = PACKAGE_DIR / "configs"
    return installed if installed.is_dir() else PACKAGE_DIR.parent.parent / "configs"


def user_configs_dir():
    """The user's own configuration folder, ``simllm`` under the per-user config folder:
    ``$XDG_CONFIG_HOME/simllm`` or ``~/.config/simllm`` on Linux, ``~/Library/Application
    Support/simllm`` on macOS, ``%LOCALAPPDATA%\\simllm`` on Windows. ``simllm calibrate``
    writes fitted framework profiles to its ``frameworks/``; a name is looked up there before
    the shipped presets (:data:`USER_KINDS`)."""
    return user_folder("config")


def user_preset_path(kind, name):
    """Where the user's own preset ``name`` of ``kind`` lives (it may not exist)."""
    return user_configs_dir() / kind / f"{_key(name)}.yaml"


def protected_folders():
    """The folders simllm never writes into: the simllm and simcore packages as installed (or
    their sources) and the shipped presets."""
    return tuple(dict.fromkeys(p.resolve() for p in (PACKAGE_DIR, SIMCORE_DIR, configs_dir())))


def refuse_protected(path, key):
    """Raise a one-line :class:`ConfigError` naming ``key`` (a flag) when ``path`` lies inside
    :func:`protected_folders`: shipped files are read, never rewritten (a calibration once
    rewrote configs/frameworks/vllm.yaml, its sourced comments included)."""
    target = Path(path).expanduser().resolve()
    for folder in protected_folders():
        if target.is_relative_to(folder):
            raise ConfigError(f"a file outside simllm's package and shipped presets ({folder}); a profile of your "
                              f"own goes anywhere else, by default under {user_configs_dir()}",
                              source=CLI, key=key, value=str(path))


def _key(name):
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def preset_names(kind):
    """Sorted preset names of ``kind`` (``"models"``, ``"hardware"``, ``"workloads"`` or ``"frameworks"``)."""
    folder = configs_dir() / kind
    return sorted(p.stem for p in folder.glob("*.yaml"))


def resolve(kind, name_or_path, *, flag):
    """Path of the config named by ``name_or_path``: an existing file or directory, else the
    user's own preset (kinds of :data:`USER_KINDS`, see :func:`user_configs_dir`), else a shipped
    preset.

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
    plain = not any(sep in wanted for sep in "/\\")
    if plain and kind in USER_KINDS:
        own = user_preset_path(kind, wanted)
        if own.is_file():
            return own
    direct = configs_dir() / kind / f"{wanted}.yaml"  # presets are named by their key: no listing
    if plain and direct.is_file():
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
