"""Reading YAML and JSON configuration files, keeping line numbers for error messages."""
import json
from pathlib import Path

import yaml

from simllm.errors import ConfigError


class LineDict(dict):
    """A dict from a YAML mapping that remembers the 1-based line of each key (``lines``)."""

    lines: dict


class _LineLoader(yaml.SafeLoader):
    pass


def _construct_mapping(loader, node, deep=False):
    loader.flatten_mapping(node)
    out = LineDict()
    out.lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        out[key] = loader.construct_object(value_node, deep=True)
        out.lines[key] = key_node.start_mark.line + 1
    return out


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def line_of(mapping, key):
    """Line of ``key`` in ``mapping`` if it came from a YAML file, else None."""
    return getattr(mapping, "lines", {}).get(key)


def load_file(path):
    """Parse a YAML or JSON file into dicts (YAML mappings as :class:`LineDict`).

    Raises
    ------
    ConfigError
        When the file is missing, unreadable, or not valid YAML/JSON (with the line number).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("no such file", source=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read file: {exc}", source=str(path)) from None
    if path.suffix.lower() == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"invalid JSON: {exc.msg}", source=str(path), line=exc.lineno) from None
    try:
        return yaml.load(text, Loader=_LineLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = exc.problem or exc.context or "syntax error"
        raise ConfigError(f"invalid YAML: {problem}", source=str(path), line=line) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML: {exc}", source=str(path)) from None
