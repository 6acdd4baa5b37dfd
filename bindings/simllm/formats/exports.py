"""Writing a :class:`~simllm.sim.results.SimResult` in the formats other tools read: which
writer a file name and format ask for, and the atomic write.

One entry point, :func:`export`, picks the format from the file's suffix and ``fmt``:

============  ====================  ==============================================================
suffix        ``fmt``               what is written
============  ====================  ==============================================================
``.json``     ``vllm`` (default)    ``vllm bench serve --save-result`` JSON (:mod:`.vllm_bench`)
``.json``     ``guidellm``          a GuideLLM ``benchmarks.json`` (:mod:`.guidellm`)
``.csv``      ``summary`` (default) one row, the summary's keys as columns (:mod:`.table`)
``.csv``      ``requests``          one row per request (:meth:`SimResult.save_detailed`'s columns)
``.parquet``  ``summary`` (default) the same one row, as Parquet (needs pyarrow)
``.parquet``  ``requests``          the per-request rows, as Parquet (needs pyarrow)
============  ====================  ==============================================================

Every file is written to a temporary file in the target folder and moved into place
(``os.replace``) once complete, so a failure never leaves a half-written file behind, nor the
temporary one. The writers' own names (:func:`vllm_result`, :func:`guidellm_report`, ...) are
importable from here too.
"""
from pathlib import Path

from simllm.errors import ConfigError
from simllm.fileio import write_output
from simllm.formats.guidellm import GUIDELLM_METRICS, GUIDELLM_PERCENTILES, distribution, guidellm_report
from simllm.formats.table import request_columns, summary_csv, summary_row, write_requests, write_summary
from simllm.formats.vllm_bench import VLLM_DETAILED_KEYS, VLLM_METRICS, VLLM_RESULT_KEYS, VLLM_SETUP_KEYS, vllm_result
from simllm.text import to_json

__all__ = ["FORMATS", "GUIDELLM_METRICS", "GUIDELLM_PERCENTILES", "SUFFIX_FORMATS", "VLLM_DETAILED_KEYS",
           "VLLM_METRICS", "VLLM_RESULT_KEYS", "VLLM_SETUP_KEYS", "distribution", "export", "guidellm_report",
           "request_columns", "resolve_format", "summary_csv", "summary_row", "vllm_result"]

#: Formats of :func:`export`.
FORMATS = ("vllm", "guidellm", "summary", "requests")
#: Which formats each suffix takes, the default first.
SUFFIX_FORMATS = {".json": ("vllm", "guidellm"), ".csv": ("summary", "requests"), ".parquet": ("summary", "requests")}


def resolve_format(path, fmt=None):
    """The format :func:`export` uses for ``path`` and ``fmt``: ``(suffix, fmt)``.

    Raises
    ------
    ConfigError
        An unknown format, a suffix other than ``.json``/``.csv``/``.parquet`` (a JSON format
        may be written under any name), or a format the suffix cannot hold.
    """
    suffix = Path(path).suffix.lower()
    if fmt is not None and fmt not in FORMATS:
        raise ConfigError(f"one of {', '.join(FORMATS)}", key="format", value=fmt)
    if suffix not in SUFFIX_FORMATS:
        if fmt in ("vllm", "guidellm"):
            return ".json", fmt
        raise ConfigError("a .json, .csv or .parquet file name (or format vllm or guidellm for JSON under "
                          "another name)", key="file", value=str(path))
    allowed = SUFFIX_FORMATS[suffix]
    if fmt is None:
        return suffix, allowed[0]
    if fmt not in allowed:
        raise ConfigError(f"{' or '.join(allowed)} for a {suffix} file ({path})", key="format", value=fmt)
    return suffix, fmt


def export(result, path, fmt=None, *, detailed=None):
    """Write ``result`` to ``path`` in the format its suffix and ``fmt`` name (see the module
    notes), atomically.

    Parameters
    ----------
    result : SimResult
    path : str or Path
    fmt : {"vllm", "guidellm", "summary", "requests"}, optional
        Default: ``vllm`` for ``.json``, ``summary`` for ``.csv`` and ``.parquet``.
    detailed : bool, optional
        vLLM JSON only: add the per-request lists (default: when the result kept them).

    Returns
    -------
    Path
        ``path``.

    Raises
    ------
    ConfigError
        A bad name or format, per-request data needed but not kept, pyarrow missing for
        Parquet, or the file cannot be written. Nothing is left behind.
    """
    path = Path(path)
    _, fmt = resolve_format(path, fmt)
    if fmt == "vllm":
        return write_output(path, to_json(vllm_result(result, detailed=detailed)))
    if fmt == "guidellm":
        return write_output(path, to_json(guidellm_report(result)))
    if fmt == "summary":
        return write_summary(result, path)
    return write_requests(result, path)
