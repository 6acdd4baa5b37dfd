"""``simllm profile``'s output: the calibrated hardware YAML (the base profile's text with the
measured factors in place, through :mod:`simllm.calibration.hwyaml`), the kernel tables it names
(``<tables dir>/<gpu>/<framework>.json``, written by :func:`simllm.calibration.kernels.write_tables`),
the raw measurements (JSON or CSV) and the summary printed by the CLI.
"""
import contextlib
import json
import math
import os
from pathlib import Path

import yaml

from simllm.calibration import kernels
from simllm.calibration.hwyaml import base_path_of, edit_hardware_yaml, generate_hardware_yaml
from simllm.config import kernels as kt
from simllm.config.hardware import hardware_from_dict, load_hardware
from simllm.errors import ConfigError
from simllm.fileio import csv_text, write_text_atomic
from simllm.text import table


def _curve_comment(result):
    parts = [f"M={p['m']}: {p['compute_fraction']:.3g}" for p in result.gemm_curve]
    lines, line = [], "#   "
    for part in parts:
        if len(line) + len(part) > 98:
            lines.append(line.rstrip(", "))
            line = "#   "
        line += part + ", "
    lines.append(line.rstrip(", "))
    return lines


def _header(result, base_path, raw_name, kept_comments, tables=None):
    lines = [
        (f"# Calibrated by `simllm profile` on {result.device_name} ({result.device}), {result.date}, "
         f"torch {result.torch_version}, {result.gemm_dtype} GEMMs, size {result.size}."),
        f"# Datasheet figures: those of {base_path.name}, kept as they are"
        + ("" if kept_comments else " (its comments are lost: not a block YAML mapping)") + ".",
        f"# Measured here (each comment says how): {', '.join(result.fitted)}.",
        f"# GEMM efficiency vs tokens M (median achieved / peak {result.gemm_dtype} FLOP/s over N, K):",
        *_curve_comment(result),
        f"# Raw measurements: {raw_name}",
    ]
    if tables is not None:
        errors = ", ".join(f"{name} {'-' if err is None else f'{100 * err:.1f}%'}"
                           for name, _, _, err, _ in kernels.fit_rows(tables))
        shapes = tables["provenance"].get("rows_measured", len(result.table_measurements))
        lines.append(f"# Kernel tables ({tables['framework']}.json, from {shapes} timed shapes; "
                     f"held-out median error {errors}): kernel_tables below.")
    lines += [f"# Note: {note}" for note in result.notes]
    return "\n".join(lines) + "\n"


def _csv_text(result):
    """The raw CSV: one row per measurement, then one ``gemm_curve`` row per tokens M."""
    rows = [dict(r) for r in result.measurements]
    rows += [{"kind": "gemm_curve", **p} for p in result.gemm_curve]
    rows += [{**r, "set": "kernel_tables"} for r in result.table_measurements]
    columns = []
    for row in rows:
        columns += [k for k in row if k not in columns]
    return csv_text(columns, ([row.get(k) for k in columns] for row in rows))  # None/missing: empty cell


def tables_value(folder, output_yaml):
    """The ``kernel_tables:`` value naming ``folder`` from a YAML written to ``output_yaml``: the
    path relative to the YAML's folder (``./NAME`` rather than a bare ``NAME``, which would name a
    shipped set), or absolute where no relative path exists."""
    folder, base = Path(folder).resolve(), Path(output_yaml).resolve().parent
    try:
        rel = Path(os.path.relpath(folder, base)).as_posix()
    except ValueError:  # another drive
        return folder.as_posix()
    return rel if "/" in rel else f"./{rel}"


def write_profile(result, base_path_or_name, output_yaml, raw_output=None, tables=None, tables_dir=None):
    """Write the calibrated hardware YAML, the raw measurements and, given ``tables``, the kernel
    tables the YAML's ``kernel_tables`` then names.

    The YAML is the base profile's text with its datasheet keys and source comments as they are,
    the measured figures in place of (or after) the base's values, each with the comment
    ``measured by simllm profile on <device>, <date>, torch <version>: <what>``, and a header with
    the GEMM efficiency curve. Both files are written atomically (temporary file + ``os.replace``);
    the YAML is checked to load before anything is written.

    Parameters
    ----------
    result : ProfileResult
    base_path_or_name : str, Path or HardwareConfig
        The base profile the result was measured against: a preset name or a YAML file.
    output_yaml : str or Path
        The hardware YAML to write (loadable with :func:`simllm.config.hardware.load_hardware`).
    raw_output : str or Path, optional
        The raw measurements: JSON (everything: metadata, fit, GEMM curve, measurements) unless the
        name ends in ``.csv`` (one row per measurement plus ``gemm_curve`` rows). Default:
        ``<output stem>.profile.json`` next to ``output_yaml``.
    tables : dict, optional
        A kernel-table mapping (:func:`simllm.calibration.profile_fit.kernel_tables`), written to
        ``<tables_dir>/<gpu>/<framework>.json``; the YAML's ``kernel_tables`` names that folder
        (relative to the YAML). None: the base's ``kernel_tables`` (if any) is kept.
    tables_dir : str or Path, optional
        Default: ``kernels`` next to ``output_yaml``.

    Returns
    -------
    (Path, Path, Path or None)
        The YAML, raw and kernel-table files written (None without ``tables``).

    Raises
    ------
    ConfigError
        For an unknown base, or a base whose peaks differ from those the result was measured against.
    """
    base_path = base_path_of(base_path_or_name)
    base = load_hardware(base_path)
    used = (base.peak_flops(result.gemm_dtype) / 1e12, base.memory_bandwidth_gbps)
    if not all(math.isclose(a, b, rel_tol=1e-9) for a, b in zip(used, (result.peak_tflops,
                                                                       result.memory_bandwidth_gbps))):
        raise ConfigError(f"the base the profile was measured against ({result.peak_tflops:g} TFLOPS "
                          f"{result.gemm_dtype}, {result.memory_bandwidth_gbps:g} GB/s), got {used[0]:g} TFLOPS, "
                          f"{used[1]:g} GB/s", source=str(base_path))
    output_yaml = Path(output_yaml)
    raw_path = Path(raw_output) if raw_output is not None else output_yaml.with_name(
        output_yaml.stem + ".profile.json")

    stamp = f"measured by simllm profile on {result.device_name}, {result.date}, torch {result.torch_version}"
    updates = [(key, value, f"{stamp}: {result.methods[key]}") for key, value in result.fitted.items()]
    written = dict(result.fitted)
    tables_path = None
    if tables is not None:
        kt.tables_from_dict(tables, "<simllm profile>")  # what is written must load
        folder = Path(tables_dir if tables_dir is not None else output_yaml.parent / "kernels") / tables["gpu"]
        tables_path = folder / f"{tables['framework']}.json"
        written["kernel_tables"] = tables_value(folder, output_yaml)
        updates.append(("kernel_tables", written["kernel_tables"],
                        f"{stamp}: shape-aware tables of torch kernels ({tables['framework']}.json)"))
    base_text = base_path.read_text(encoding="utf-8")
    base_data = yaml.safe_load(base_text) if base_path.suffix.lower() != ".json" else json.loads(base_text)
    expected = dict(base_data.get("hardware", base_data))
    expected.update(written)

    body = edit_hardware_yaml(base_text, updates) if base_path.suffix.lower() != ".json" else None
    if body is not None:
        with contextlib.suppress(yaml.YAMLError, AttributeError):
            parsed = yaml.safe_load(body)
            if dict(parsed.get("hardware", parsed)) != expected:
                body = None
    kept = body is not None
    if body is None:
        body = generate_hardware_yaml(base_data, updates)
    text = _header(result, base_path, raw_path.name, kept, tables) + body
    data = yaml.safe_load(text)
    # Raises ConfigError before anything is written (the new tables, not yet written, are checked above).
    check = hardware_from_dict(data, str(output_yaml), with_tables=tables is None)
    if tables is not None and data.get("hardware", data).get("kernel_tables") != written["kernel_tables"]:
        raise ConfigError(f"kernel_tables = {written['kernel_tables']!r} after writing, read back otherwise",
                          source=str(output_yaml))
    for key, value in result.fitted.items():
        if getattr(check, key) != value:
            raise ConfigError(f"{key} = {value!r} after writing, read back as {getattr(check, key)!r}",
                              source=str(output_yaml))

    if raw_path.suffix.lower() == ".csv":
        raw_text = _csv_text(result)
    else:
        raw_text = json.dumps({"format": "simllm-profile", "version": 1, "base": str(base_path),
                               "hardware_yaml": str(output_yaml), **result.to_dict()},
                              indent=1, allow_nan=False) + "\n"
    if tables is not None:
        kernels.write_tables(tables, tables_path.parent)
    write_text_atomic(raw_path, raw_text)
    write_text_atomic(output_yaml, text)
    return output_yaml, raw_path, tables_path


def format_tables(tables):
    """The kernel tables' fit, one line per table: rows, held-out rows, the held-out median
    ``|predicted / measured - 1|`` and the rows clipped at the roofline (for the CLI)."""
    rows = [(name, used, held, "-" if err is None else f"{100 * err:.1f}%", clipped)
            for name, used, held, err, clipped in kernels.fit_rows(tables)]
    lines = [f"kernel tables ({tables['framework']}.json, {tables['framework_version']}; held-out median "
             "|predicted/measured - 1|)", table(("table", "rows", "held out", "median error", "clipped >1"), rows)]
    lines += [f"  omitted {name}: {why}" for name, why in tables["provenance"].get("omitted", {}).items()]
    return "\n".join(lines)


def format_profile(result):
    """A short human-readable summary of a :class:`ProfileResult` (for the CLI)."""
    lines = [
        (f"simllm profile: {result.device_name} ({result.device}), torch {result.torch_version}, "
         f"{result.gemm_dtype} GEMMs, size {result.size}, against {result.gpu} datasheet peaks"),
        (f"  compute_utilization    {result.compute_utilization:<10.4g} GEMMs {result.gemm_tflops:.4g} of "
         f"{result.peak_tflops:.6g} TFLOPS"),
        (f"  bandwidth_utilization  {result.bandwidth_utilization:<10.4g} copy {result.copy_gbps:.4g} of "
         f"{result.memory_bandwidth_gbps:g} GB/s; decode attention {result.decode_bandwidth_fraction:.3g} of it"),
        f"  launch_overhead_us     {result.launch_overhead_us:<10.4g}",
    ]
    if result.interconnect_utilization is not None:
        lines.append(f"  interconnect_utilization {result.interconnect_utilization:.4g}")
    if result.interconnect_latency_us is not None:
        lines.append(f"  interconnect_latency_us  {result.interconnect_latency_us:.4g}")
    lines.append("  GEMM efficiency vs tokens M: "
                 + ", ".join(f"{p['m']}: {p['compute_fraction']:.3g}" for p in result.gemm_curve))
    lines += [f"  note: {note}" for note in result.notes]
    return "\n".join(lines)
