"""Reading YAML and JSON configuration files, keeping line numbers for error messages."""
import json
from pathlib import Path

import yaml

from simllm.errors import ConfigError


class LineDict(dict):
    """A dict from a YAML mapping that remembers the 1-based line of each key (``lines``)."""

    lines: dict


MAX_DEPTH = 64  # nesting of YAML collections; simllm's files need about 6
MAX_ALIASES = 1000  # alias uses in one file (an alias bomb uses millions)


class _LineLoader(yaml.SafeLoader):
    """PyYAML's safe loader with bounds: collections nested at most :data:`MAX_DEPTH` deep and at
    most :data:`MAX_ALIASES` aliases (each error names the line). ``source`` names the file."""

    source = "<yaml>"
    _depth = 0
    _aliases = 0

    def compose_node(self, parent, index):
        event = self.peek_event()
        line = event.start_mark.line + 1 if event.start_mark is not None else None
        if isinstance(event, yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise ConfigError(f"invalid YAML: more than {MAX_ALIASES} aliases", source=self.source, line=line)
        nested = isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent))
        if nested:
            self._depth += 1
            if self._depth > MAX_DEPTH:
                raise ConfigError(f"invalid YAML: nested more than {MAX_DEPTH} levels deep", source=self.source,
                                  line=line)
        try:
            return super().compose_node(parent, index)
        finally:
            if nested:
                self._depth -= 1


def _construct_mapping(loader, node, deep=False):
    loader.flatten_mapping(node)
    out = LineDict()
    out.lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        try:
            duplicate = key in out
        except TypeError:  # an unhashable key (a list or mapping as a key)
            raise ConfigError("invalid YAML: a key must be a string or number", source=loader.source,
                              line=line) from None
        if duplicate:
            raise ConfigError(f"duplicate key (first at line {out.lines[key]})", source=loader.source,
                              key=str(key)[:100], line=line)
        out[key] = loader.construct_object(value_node, deep=True)
        out.lines[key] = line
    return out


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


class _DuplicateKey(Exception):
    pass


def _json_object(pairs):
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return out


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
            return json.loads(text, object_pairs_hook=_json_object)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"invalid JSON: {exc.msg}", source=str(path), line=exc.lineno) from None
        except _DuplicateKey as exc:
            raise ConfigError("duplicate key in a JSON object", source=str(path), key=str(exc.args[0])[:100]) from None
        except RecursionError:
            raise ConfigError("invalid JSON: nested too deep", source=str(path)) from None
    return load_yaml_text(text, str(path))


def load_yaml_text(text, source):
    """Parse YAML ``text`` from ``source`` (named in errors) with :class:`LineDict` mappings and the
    loader's bounds (duplicate keys, depth, aliases)."""
    loader = _LineLoader(text)
    loader.source = source
    try:
        return loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = exc.problem or exc.context or "syntax error"
        raise ConfigError(f"invalid YAML: {problem}", source=source, line=line) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML: {exc}", source=source) from None
    except RecursionError:  # deeper than the bound in a way compose_node does not see (flow scalars)
        raise ConfigError(f"invalid YAML: nested more than {MAX_DEPTH} levels deep", source=source) from None
    finally:
        loader.dispose()
