"""HuggingFace model ids (``meta-llama/Llama-3.1-8B-Instruct``), resolved offline: to the shipped
preset that stands for the id (each preset lists its ids under ``model.hf_ids``, instruct and base
variants included; matched case-insensitively, as the Hub matches them), else to the id's
``config.json`` in the local HuggingFace cache, where ``huggingface_hub`` keeps it. Nothing is ever
downloaded."""
import functools
import os
import re
from pathlib import Path

from simllm.config import presets
from simllm.config.yamlio import load_file
from simllm.errors import CLI, ConfigError

#: A Hub repository id: an organisation or user, a slash, a model name (the Hub's characters).
HF_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9_.-]+")


def is_hf_id(text):
    """Whether ``text`` reads as a Hub model id (``ORG/NAME``, no file suffix)."""
    text = str(text)
    return bool(HF_ID.fullmatch(text)) and not text.lower().endswith((".yaml", ".yml", ".json"))


def hub_cache_dir():
    """The HuggingFace hub cache folder, as ``huggingface_hub`` finds it: ``$HF_HUB_CACHE`` (or
    the older ``$HUGGINGFACE_HUB_CACHE``), else ``$HF_HOME/hub``, else
    ``$XDG_CACHE_HOME/huggingface/hub``, else ``~/.cache/huggingface/hub``."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return Path(os.environ[var]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(xdg).expanduser() / "huggingface" / "hub"


@functools.lru_cache(maxsize=1)
def preset_hf_ids():
    """``{hf id in lower case: model preset name}`` from every shipped model preset's ``hf_ids``."""
    index = {}
    for name in presets.preset_names("models"):
        data = load_file(presets.configs_dir() / "models" / f"{name}.yaml")
        model = data.get("model") if isinstance(data, dict) else None
        for hf_id in (model or {}).get("hf_ids") or ():
            index[str(hf_id).lower()] = name
    return index


def cached_config(hf_id, cache=None):
    """The ``config.json`` of ``hf_id`` in the hub cache ``cache`` (default :func:`hub_cache_dir`),
    or None: ``models--ORG--NAME/snapshots/<revision>/config.json``, the revision ``refs/main``
    names first, else the newest snapshot holding one. The folder's name is matched
    case-insensitively."""
    cache = Path(cache) if cache is not None else hub_cache_dir()
    wanted = "models--" + hf_id.replace("/", "--")
    repo = cache / wanted
    if not repo.is_dir():
        try:
            repo = next((p for p in cache.iterdir() if p.name.lower() == wanted.lower() and p.is_dir()), None)
        except OSError:  # no cache folder at all
            return None
        if repo is None:
            return None
    ref = repo / "refs" / "main"
    if ref.is_file():
        config = repo / "snapshots" / ref.read_text(encoding="utf-8").strip() / "config.json"
        if config.is_file():
            return config
    snapshots = sorted((p / "config.json" for p in (repo / "snapshots").glob("*") if (p / "config.json").is_file()),
                       key=lambda p: p.stat().st_mtime, reverse=True)
    return snapshots[0] if snapshots else None


def resolve_hf_id(hf_id, *, flag="--model"):
    """The model file for the Hub id ``hf_id``: the shipped preset that stands for it, else its
    ``config.json`` in the local hub cache.

    Raises
    ------
    ConfigError
        One line naming both places tried (the presets' ids and the cache folder).
    """
    preset = preset_hf_ids().get(hf_id.lower())
    if preset is not None:
        return presets.configs_dir() / "models" / f"{preset}.yaml"
    config = cached_config(hf_id)
    if config is not None:
        return config
    cache = hub_cache_dir()
    raise ConfigError(
        f"a HuggingFace model simllm can read offline: no shipped preset stands for it (their model.hf_ids) "
        f"and the HuggingFace cache has no config.json for it "
        f"({cache / ('models--' + hf_id.replace('/', '--'))}; HF_HUB_CACHE or HF_HOME move the cache); "
        f"simllm never downloads: `hf download {hf_id} config.json` fetches it, or pass a config.json path",
        source=CLI, key=flag, value=hf_id)
