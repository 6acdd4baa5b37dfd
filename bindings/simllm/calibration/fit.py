"""``simllm calibrate``: fit a hardware profile's efficiency factors to measured serving points.

The datasheet figures (peak FLOP/s, bandwidth, memory) stay as they are; what is fitted is how
much of them a serving stack achieves: ``compute_utilization``, ``bandwidth_utilization``,
``launch_overhead_us`` (per kernel), ``interconnect_latency_us`` (per collective) and
``frontend_latency_ms`` (HTTP, tokenization and hand-off before the engine sees a request).

Method: every point is simulated under its own conditions (:mod:`simllm.calibration.validate`); the
residuals are the log errors ``log(predicted / measured)`` of TTFT and TPOT. A damped
Gauss-Newton (Levenberg-Marquardt) search over the factors, in unbounded coordinates (logit for
utilisations, log for latencies), minimises their sum of squares under a Huber loss (residuals
beyond ``HUBER`` count linearly, so a few broken measurements cannot pull the fit). The
Jacobian comes from forward differences, one re-simulation of every point per factor. Numpy
only.

Leave-one-out error: the PRESS residuals of the fit linearised at its last iteration (each
point's residuals divided out of its own leverage, ``(I - H_ii)^-1 r_i`` with ``H`` the hat
matrix of the weighted Jacobian): what each point's error would be had it not been fitted,
without refitting once per point. A point the fit hinges on alone (leverage ~1) gets none.
"""
import math
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import yaml

from simllm.calibration import hwyaml
from simllm.calibration import validate as accuracy
from simllm.config.hardware import hardware_from_dict
from simllm.errors import ConfigError
from simllm.fileio import write_text_atomic
from simllm.sim.stats import abs_error_stats

HUBER = 0.25  # log-error beyond which a residual counts linearly (about 28%)
FIT_METRICS = ("ttft", "tpot")

# name: (kind, lowest value). Utilisations live in (0, 1); latencies above a physical floor:
# a collective over NVLink or PCIe takes at least a microsecond or so, a kernel launch inside a
# CUDA graph a fraction of one.
FACTORS = {
    "compute_utilization": ("fraction", 0.0),
    "bandwidth_utilization": ("fraction", 0.0),
    "launch_overhead_us": ("latency", 0.2),
    "interconnect_latency_us": ("latency", 1.0),
    "frontend_latency_ms": ("latency", 0.0),
}
DEFAULT_FACTORS = tuple(FACTORS)


def _to_z(name, value):
    kind, low = FACTORS[name]
    if kind == "fraction":
        v = min(max(value, 1e-4), 1.0 - 1e-4)
        return math.log(v / (1.0 - v))
    return math.log(max(value - low, 1e-3))


def _from_z(name, z):
    kind, low = FACTORS[name]
    if kind == "fraction":
        return 1.0 / (1.0 + math.exp(-z))
    return low + math.exp(z)


@dataclass(frozen=True)
class Fit:
    """A calibration: the fitted ``factors`` (name -> value) on top of ``base``, the points
    predicted with them, and the errors (``error_summary`` form per metric)."""

    base: object  # HardwareConfig
    factors: dict
    initial: dict
    points: list
    fit_error: dict
    loo_error: dict
    iterations: int
    evaluations: int

    @property
    def hardware(self):
        """The calibrated HardwareConfig (the base's per-framework factors dropped)."""
        return replace(self.base, frameworks=(), **self.factors)


def _residuals(points):
    """Log errors of every fitted point (rows: point, columns: FIT_METRICS; nan where a metric
    is not measured or a point failed)."""
    r = np.full((len(points), len(FIT_METRICS)), np.nan)
    for i, p in enumerate(points):
        if p.inconsistent:  # faster than the peaks somewhere: not the stated configuration
            continue
        for j, metric in enumerate(FIT_METRICS):
            e = p.error(metric)
            if not math.isnan(e) and e > -1.0:
                r[i, j] = math.log1p(e)
    return r


def _huber_weights(r):
    a = np.abs(r)
    return np.where(a <= HUBER, 1.0, HUBER / np.maximum(a, 1e-12))


def _cost(r):
    a = np.abs(r)
    return float(np.sum(np.where(a <= HUBER, 0.5 * a**2, HUBER * (a - 0.5 * HUBER))))


def _loo(r, jac, w):
    """PRESS residuals per point, shape of ``r``."""
    n, k = r.shape
    sw = np.sqrt(w).reshape(n * k, 1)
    jw = (jac.reshape(n * k, -1)) * sw
    inv = np.linalg.pinv(jw.T @ jw)
    out = np.full_like(r, np.nan)
    for i in range(n):
        rows = slice(i * k, (i + 1) * k)
        h = jw[rows] @ inv @ jw[rows].T
        ri = (r[i] * sw[rows, 0])
        ok = ~np.isnan(ri)
        if not ok.any():
            continue
        m = np.eye(int(ok.sum())) - h[np.ix_(ok, ok)]
        if np.min(np.linalg.eigvalsh((m + m.T) / 2)) < 1e-3:
            continue  # the fit hinges on this point alone (leverage ~1): no leave-one-out estimate
        out[i, ok] = np.linalg.solve(m, ri[ok]) / sw[rows, 0][ok]
    return out


def _summary(points, r):
    out = {}
    for j, metric in enumerate(FIT_METRICS):
        e = np.expm1(r[:, j])
        e = np.abs(e[~np.isnan(e)])
        if e.size:
            out[metric] = abs_error_stats(e)
    return out


def calibrate(points, base, factors=DEFAULT_FACTORS, max_iterations=12, shape=accuracy.BenchmarkShape(),
              num_prompts=0, workers=0, progress=None):
    """Fit ``factors`` of hardware ``base`` to the measured ``points``.

    Parameters
    ----------
    points : list of accuracy.Point
        From :func:`simllm.calibration.validate.resolve`; points with a skip reason are left out, the rest
        must all map to the same hardware preset.
    base : HardwareConfig
        The datasheet profile whose factors are fitted (its values are the starting point).
    factors : sequence of str
        Names from :data:`FACTORS`.
    max_iterations : int
        Levenberg-Marquardt iterations at most (each costs ``1 + len(factors)`` passes over the
        points).
    progress : callable, optional
        Called with a one-line status after each pass.

    Returns
    -------
    Fit
    """
    unknown = [f for f in factors if f not in FACTORS]
    if unknown:
        raise ConfigError(f"one of {', '.join(FACTORS)}", source="command line", key="--fit", value=unknown[0])
    usable = [p for p in points if not p.reason]
    if any(p.bound is None for p in usable):
        usable = accuracy.with_bounds(usable, num_prompts, shape, workers)
    if len(usable) < len(factors) + 1:
        raise ConfigError(f"at least {len(factors) + 1} measured points that map to presets to fit "
                          f"{len(factors)} factors, got {len(usable)}")
    systems = sorted({p.hardware for p in usable})
    if len(systems) != 1:
        raise ConfigError(f"measurements of one hardware preset (got {', '.join(systems)}); use --filter")
    names = list(factors)
    initial = {f: getattr(base, f) for f in names}
    z = np.array([_to_z(f, initial[f]) for f in names])
    evaluations = 0

    def run(zv, pts):
        nonlocal evaluations
        evaluations += 1
        hw = replace(base, frameworks=(), **{f: _from_z(f, v) for f, v in zip(names, zv)})
        out = accuracy.predict_points(pts, lambda _name: hw, num_prompts, shape, workers)
        r = _residuals(out)
        # A point that fails (say, out of memory) under trial factors counts as a large error.
        r[[p.predicted is None for p in out]] = 3.0
        return out, r

    pts, r = run(z, usable)
    # Points that cannot run under the starting factors are left out of the fit.
    ran = [p.predicted is not None for p in pts]
    usable = [u for u, ok in zip(usable, ran) if ok]
    pts, r = [p for p, ok in zip(pts, ran) if ok], r[ran]
    keep = ~np.all(np.isnan(r), axis=1)  # points with something to fit
    cost = _cost(r[keep][~np.isnan(r[keep])])
    lam = 1e-2
    step = 0.1
    it = 0
    jac = None
    for it in range(1, max_iterations + 1):
        jac = np.zeros(r.shape + (len(names),))
        for k in range(len(names)):
            zk = z.copy()
            zk[k] += step
            _, rk = run(zk, usable)
            jac[:, :, k] = (rk - r) / step
        jac = np.nan_to_num(jac)
        valid = ~np.isnan(r)
        w = np.where(valid, _huber_weights(np.nan_to_num(r)), 0.0)
        jf = jac.reshape(-1, len(names))
        rf = np.nan_to_num(r).reshape(-1)
        wf = w.reshape(-1)
        a = jf.T @ (jf * wf[:, None])
        g = jf.T @ (wf * rf)
        improved = False
        for _ in range(6):
            delta = -np.linalg.solve(a + lam * np.diag(np.diag(a) + 1e-9), g)
            delta = np.clip(delta, -2.0, 2.0)
            p_new, r_new = run(z + delta, usable)
            c_new = _cost(r_new[keep][~np.isnan(r_new[keep])])
            if c_new < cost:
                z, pts, r, cost = z + delta, p_new, r_new, c_new
                lam = max(lam / 3.0, 1e-6)
                improved = True
                break
            lam *= 4.0
        if progress:
            progress(f"iteration {it}: cost {cost:.4f}, " + ", ".join(
                f"{f}={_from_z(f, v):.4g}" for f, v in zip(names, z)))
        if not improved or np.max(np.abs(delta)) < 1e-3:
            break
    w = np.where(~np.isnan(r), _huber_weights(np.nan_to_num(r)), 0.0)
    loo = _loo(np.where(np.isnan(r), np.nan, r), jac if jac is not None else np.zeros(r.shape + (len(names),)), w)
    fitted = {f: float(_from_z(f, v)) for f, v in zip(names, z)}
    return Fit(base=base, factors=fitted, initial=initial, points=pts, fit_error=_summary(pts, r),
               loo_error=_summary(pts, loo), iterations=it, evaluations=evaluations)


def describe_points(points):
    """One phrase saying what a fit was fitted on: point count, models, backends, sources."""
    used = [p for p in points if p.predicted is not None and not p.inconsistent]
    left = sum(1 for p in points if p.predicted is not None and p.inconsistent)
    models = sorted({p.model for p in used})
    backends = sorted({p.measurement.backend for p in used if p.measurement.backend})
    sources = sorted({Path(p.measurement.source.split("#")[0]).name for p in used})
    out = (f"{len(used)} measured points ({', '.join(models)}; {', '.join(backends) or 'unknown backend'}) "
           f"from {', '.join(sources)}")
    return out + (f" ({left} faster than the peaks left out)" if left else "")


def _frameworks_block(frameworks, comments, indent="  "):
    lines = [f"{indent}frameworks:                      # factors that replace the ones above for "
             "`--framework NAME` (calibrated)"]
    for name, factors in frameworks:
        if name in comments:
            lines.append(f"{indent}  # {comments[name]}")
        lines.append(f"{indent}  {name}:")
        for key, value in factors:
            lines.append(f"{indent}    {key}: {hwyaml.yaml_number(_round(value))}")
    return lines


def _round(x):
    return float(f"{x:.4g}")


def _without_frameworks(text):
    """``text`` without its ``frameworks:`` block (kept comments of other keys untouched)."""
    lines = text.splitlines()
    out, skip_indent = [], None
    for line in lines:
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if skip_indent is not None:
            if not stripped or indent > skip_indent or (stripped.startswith("#") and indent > skip_indent):
                continue
            skip_indent = None
        if stripped.startswith("frameworks:") or stripped.startswith("frameworks :"):
            skip_indent = indent
            # A comment block directly above belongs to it.
            while out and out[-1].strip().startswith("#") and "frameworks" in out[-1]:
                out.pop()
            continue
        out.append(line)
    return "\n".join(out) + "\n"


def write_calibration(fit, output, framework="vllm", date=None):
    """Write the calibrated hardware YAML: the base profile's text with its datasheet figures
    and source comments as they are; the fitted factors replace the base's (``framework``
    vllm, the scheduler simllm simulates) or go under ``frameworks: NAME`` (sglang, trtllm),
    each with a comment saying what it was fitted on. Written atomically, checked to load first.

    Returns the path written.
    """
    base_path = hwyaml.base_path_of(fit.base)
    original = base_path.read_text(encoding="utf-8")
    date = date or datetime.now(timezone.utc).strftime("%Y-%m-%d")
    what = f"fitted by simllm calibrate on {describe_points(fit.points)}, {date}"
    frameworks = dict(fit.base.frameworks)
    comments = _old_framework_comments(original)
    text = _without_frameworks(original)
    if framework == "vllm":
        updates = [(k, _round(v), f"{what}; was {getattr(fit.base, k):g}") for k, v in fit.factors.items()]
        text = hwyaml.edit_hardware_yaml(text, updates)
        if text is None:
            raise ConfigError("a block-style YAML hardware profile to edit", source=str(base_path))
    else:
        frameworks[framework] = tuple(fit.factors.items())
        comments[framework] = what
    if frameworks:
        lines = text.rstrip().splitlines()
        text = "\n".join(lines + _frameworks_block(sorted(frameworks.items()), comments)) + "\n"
    data = yaml.safe_load(text)
    hardware_from_dict(data, str(output))  # refuse to write what would not load
    out = Path(output)
    write_text_atomic(out, text)
    return out


def _old_framework_comments(text):
    """Comments of the base's ``frameworks`` entries (``# ...`` right above ``  name:``)."""
    out = {}
    lines = text.splitlines()
    for i, line in enumerate(lines[1:], 1):
        s = line.strip()
        if s.endswith(":") and s[:-1] in ("vllm", "sglang", "trtllm") and lines[i - 1].strip().startswith("#"):
            out[s[:-1]] = lines[i - 1].strip().lstrip("#").strip()
    return out
