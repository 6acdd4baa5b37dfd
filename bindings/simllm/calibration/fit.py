"""``simllm calibrate``: fit a hardware profile's efficiency factors and a serving framework's
overheads to measured serving points.

The datasheet figures (peak FLOP/s, bandwidth, memory) stay as they are; what is fitted is how
much of them a serving stack achieves. GPU factors (``compute_utilization``,
``bandwidth_utilization``, ``interconnect_latency_us`` per collective) go to the hardware
profile; framework quantities (``frontend_latency_ms`` per request, ``iteration_overhead_us``
per engine step, ``launch_overhead_us`` per kernel) go to the framework profile
(configs/frameworks/NAME.yaml) and move only within the bounds the profile's fields declare
(:data:`simllm.config.framework.BOUNDS`): a fit that wants more than is physical ends at the
bound and says so (:attr:`Fit.bound_hits`) instead of absorbing, say, a benchmark client's own
latency into the framework (that belongs to ``Measurement.client_overhead_ms``).

Method: every point is simulated under its own conditions (:mod:`simllm.calibration.validate`); the
residuals are the log errors ``log(predicted / measured)`` of TTFT and TPOT. A damped
Gauss-Newton (Levenberg-Marquardt) search over the factors, in unbounded coordinates (logit
between the bounds for utilisations and framework quantities, log above a floor for the
collective latency), minimises their sum of squares under a Huber loss (residuals
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
from simllm.config.framework import BOUNDS, framework_from_dict, load_framework
from simllm.config.hardware import FRAMEWORK_OVERRIDE_KEYS, hardware_from_dict
from simllm.config.presets import refuse_protected, user_preset_path
from simllm.errors import ConfigError
from simllm.fileio import write_output
from simllm.sim.stats import abs_error_stats

HUBER = 0.25  # log-error beyond which a residual counts linearly (about 28%)
FIT_METRICS = ("ttft", "tpot")

# name: (kind, lowest value, highest value). Utilisations live in (0, 1); a collective over NVLink
# or PCIe takes at least a microsecond or so (no upper bound); the framework quantities live
# within their profile fields' documented bounds.
GPU_FACTORS = ("compute_utilization", "bandwidth_utilization", "interconnect_latency_us")
FRAMEWORK_FACTORS = ("frontend_latency_ms", "iteration_overhead_us", "sequence_overhead_us", "launch_overhead_us",
                     "unsplit_decode_ns_per_key", "quantized_gemm_bf16_share")
# What a fit moves by default: the per-sequence overhead, the decode-attention floor and the
# quantised GEMMs' share only when asked for (--fit): most measurements cannot tell them from the
# per-step overhead and the kernel tables (they need concurrencies, contexts and dtypes far apart).
DEFAULT_FRAMEWORK_FACTORS = ("frontend_latency_ms", "iteration_overhead_us", "launch_overhead_us")
# What the measurements' benchmark client adds to each request's TTFT and E2E latency
# (Measurement.client_overhead_ms): a property of the data, fitted only when asked for and
# written to no preset (the report and JSON say it; a measurement import may then declare it).
MEASUREMENT_FACTORS = ("client_overhead_ms",)
CLIENT_OVERHEAD_MAX_MS = 1000.0
FACTORS = {
    "compute_utilization": ("bounded", 0.0, 1.0),
    "bandwidth_utilization": ("bounded", 0.0, 1.0),
    "interconnect_latency_us": ("floor", 1.0, math.inf),
    **{name: ("bounded", *BOUNDS[name]) for name in FRAMEWORK_FACTORS},
    "client_overhead_ms": ("bounded", 0.0, CLIENT_OVERHEAD_MAX_MS),
}
DEFAULT_FACTORS = GPU_FACTORS + DEFAULT_FRAMEWORK_FACTORS


def default_factors(hardware, framework="vllm"):
    """What a fit moves by default: with kernel tables for ``framework`` on ``hardware`` (the
    tables already carry each operator's shape-dependent efficiency, from measured kernels) only
    the framework quantities; on the scalar roofline every factor."""
    return DEFAULT_FRAMEWORK_FACTORS if hardware.tables_for(framework) is not None else DEFAULT_FACTORS
BOUND_TOLERANCE = 0.01  # a factor within 1% of its range from a bound has hit it


def _to_z(name, value):
    kind, low, high = FACTORS[name]
    if kind == "bounded":
        u = min(max((value - low) / (high - low), 1e-4), 1.0 - 1e-4)
        return math.log(u / (1.0 - u))
    return math.log(max(value - low, 1e-3))


def _from_z(name, z):
    kind, low, high = FACTORS[name]
    if kind == "bounded":
        return low + (high - low) / (1.0 + math.exp(-z))
    return low + math.exp(z)


def _unit(name):
    return {"ms": " ms", "us": " us"}.get(name.rsplit("_", 1)[-1], "")


def bound_hits(factors):
    """``(name, "lower" | "upper", bound)`` of each fitted factor within 1% of its range from a
    bound (or, with no upper bound, within 1% of its floor)."""
    out = []
    for name, value in factors.items():
        _, low, high = FACTORS[name]
        span = (high - low) if math.isfinite(high) else max(abs(low), 1e-12)
        if value - low <= BOUND_TOLERANCE * span:
            out.append((name, "lower", low))
        elif math.isfinite(high) and high - value <= BOUND_TOLERANCE * span:
            out.append((name, "upper", high))
    return tuple(out)


def describe_bound_hit(hit):
    """``"frontend_latency_ms hit its upper bound 10 ms"``."""
    name, side, bound = hit
    return f"{name} hit its {side} bound {bound:g}{_unit(name)}"


@dataclass(frozen=True)
class Fit:
    """A calibration: the fitted ``factors`` (name -> value) on top of ``base`` (GPU factors) and
    ``framework`` (framework quantities), the points predicted with them, the errors
    (``error_summary`` form per metric) and the factors that ended at a bound."""

    base: object  # HardwareConfig
    factors: dict
    initial: dict
    points: list
    fit_error: dict
    loo_error: dict
    iterations: int
    evaluations: int
    framework: object = None  # the FrameworkProfile fitted from (None: vllm's)
    bound_hits: tuple = ()  # (name, "lower" | "upper", bound), see bound_hits()
    metrics: tuple = FIT_METRICS  # the metrics fitted

    @property
    def hardware(self):
        """The calibrated HardwareConfig: the base with the fitted GPU factors (and, where
        framework quantities were fitted, without the base's overrides of them)."""
        return _trial_hardware(self.base, self.factors)

    @property
    def framework_profile(self):
        """The calibrated FrameworkProfile: the starting profile with the fitted framework quantities."""
        return _trial_framework(self.framework or load_framework("vllm"), self.factors)


def _trial_hardware(base, factors):
    gpu = {k: v for k, v in factors.items() if k in GPU_FACTORS}
    dropped = {k: None for k in FRAMEWORK_OVERRIDE_KEYS if k in factors}  # the fitted profile's value counts
    return replace(base, **gpu, **dropped)


def _trial_framework(profile, factors):
    return profile.with_overrides(**{k: v for k, v in factors.items() if k in FRAMEWORK_FACTORS})


def _residuals(points, metrics=FIT_METRICS):
    """Log errors of every fitted point (rows: point, columns: ``metrics``; nan where a metric
    is not measured or a point failed)."""
    r = np.full((len(points), len(metrics)), np.nan)
    for i, p in enumerate(points):
        if p.inconsistent:  # faster than the peaks somewhere: not the stated configuration
            continue
        for j, metric in enumerate(metrics):
            e = p.error(metric)
            if not math.isnan(e) and e > -1.0:
                r[i, j] = math.log1p(e)
    return r


def fit_client_overhead(points, high=CLIENT_OVERHEAD_MAX_MS):
    """The ``client_overhead_ms`` that best explains already predicted ``points``, without
    simulating again: it only adds to the predicted TTFT (and E2E), so the fit is one-dimensional.
    Minimises the same Huber loss of TTFT log errors as :func:`calibrate` over ``[0, high]``
    (a grid of 1 ms, then golden-section refinement), each prediction taken without the client
    overhead its measurement declared. Returns ``(value_ms, points_used)``.
    """
    base, meas = [], []
    for p in points:
        if p.predicted is None or p.inconsistent:
            continue
        m = p.measurement
        if m.ttft_ms and not math.isnan(m.ttft_ms):
            base.append(p.predicted["ttft"] - getattr(m, "client_overhead_ms", 0.0))
            meas.append(m.ttft_ms)
    if not base:
        raise ConfigError("measured TTFTs of points that map to presets to fit client_overhead_ms")
    base, meas = np.array(base), np.array(meas)

    def cost(c):
        r = np.log(np.maximum(base + c, 1e-9) / meas)
        return _cost(r)

    grid = np.arange(0.0, high + 1.0, 1.0)
    i = int(np.argmin([cost(c) for c in grid]))
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    g = (math.sqrt(5.0) - 1.0) / 2.0
    for _ in range(40):
        a, b = hi - g * (hi - lo), lo + g * (hi - lo)
        if cost(a) <= cost(b):
            hi = b
        else:
            lo = a
    return float((lo + hi) / 2.0), len(base)


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


def _summary(points, r, metrics=FIT_METRICS):
    out = {}
    for j, metric in enumerate(metrics):
        e = np.expm1(r[:, j])
        e = np.abs(e[~np.isnan(e)])
        if e.size:
            out[metric] = abs_error_stats(e)
    return out


def calibrate(points, base, factors=None, max_iterations=12, shape=accuracy.BenchmarkShape(),
              num_prompts=0, workers=0, progress=None, framework=None, metrics=FIT_METRICS):
    """Fit ``factors`` of hardware ``base`` and framework profile ``framework`` to the measured
    ``points``.

    Parameters
    ----------
    points : list of accuracy.Point
        From :func:`simllm.calibration.validate.resolve`; points with a skip reason are left out, the rest
        must all map to the same hardware preset.
    base : HardwareConfig
        The datasheet profile whose factors are fitted (its values are the starting point).
    factors : sequence of str, optional
        Names from :data:`FACTORS`: GPU factors (:data:`GPU_FACTORS`) and framework quantities
        (:data:`FRAMEWORK_FACTORS`, kept within their documented bounds); default
        :func:`default_factors`.
    framework : FrameworkProfile or str, optional
        The framework profile whose quantities are fitted (its values, or ``base``'s explicit
        overrides of them, are the starting point); default vllm's. Every point is simulated
        with it.
    max_iterations : int
        Levenberg-Marquardt iterations at most (each costs ``1 + len(factors)`` passes over the
        points).
    progress : callable, optional
        Called with a one-line status after each pass.
    metrics : sequence of str
        The measured metrics whose log errors the fit minimises (of :data:`METRICS`; default TTFT
        and TPOT): TPOT alone fits per-step quantities without what a TTFT carries beyond the
        engine.

    Returns
    -------
    Fit
    """
    profile = load_framework(framework or "vllm")
    if factors is None:
        factors = default_factors(base, profile.name)
    bad = [m for m in metrics if m not in accuracy.METRICS]
    if bad or not metrics:
        raise ConfigError(f"one or more of {', '.join(accuracy.METRICS)}", source="command line", key="--fit-metrics",
                          value=bad[0] if bad else "")
    metrics = tuple(dict.fromkeys(metrics))
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
    names = list(factors)
    gpu_wide = any(f in GPU_FACTORS for f in names)
    if gpu_wide and len(systems) != 1:
        raise ConfigError(f"measurements of one hardware preset to fit GPU factors (got {', '.join(systems)}); "
                          f"use --filter, or fit only {', '.join(FRAMEWORK_FACTORS + MEASUREMENT_FACTORS)}")
    # Framework and measurement quantities do not depend on the GPU: each point then runs on its
    # own hardware preset (``base`` for the one it was loaded as).
    presets = {name: base if len(systems) == 1 or name == base.gpu else accuracy.preset_hardware(name)
               for name in systems}
    start = profile.with_overrides(**{k: getattr(base, k) for k in FRAMEWORK_OVERRIDE_KEYS
                                      if getattr(base, k) is not None})
    initial = {f: (0.0 if f in MEASUREMENT_FACTORS else getattr(start if f in FRAMEWORK_FACTORS else base, f))
               for f in names}
    z = np.array([_to_z(f, initial[f]) for f in names])
    evaluations = 0

    def run(zv, pts):
        nonlocal evaluations
        evaluations += 1
        trial = {f: _from_z(f, v) for f, v in zip(names, zv)}
        hws = {name: _trial_hardware(hw, trial) for name, hw in presets.items()}
        fw = _trial_framework(start, trial)
        if "client_overhead_ms" in trial:
            pts = [replace(p, measurement=replace(p.measurement, client_overhead_ms=trial["client_overhead_ms"]))
                   for p in pts]
        out = accuracy.predict_points(pts, hws.get, num_prompts, shape, workers, framework_for=lambda _name: fw)
        r = _residuals(out, metrics)
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
    hits = bound_hits(fitted)
    if progress:
        for hit in hits:
            progress(describe_bound_hit(hit))
    return Fit(base=base, factors=fitted, initial=initial, points=pts, fit_error=_summary(pts, r, metrics),
               loo_error=_summary(pts, loo, metrics), iterations=it, evaluations=evaluations, framework=start,
               bound_hits=hits, metrics=metrics)


def describe_points(points):
    """One phrase saying what a fit was fitted on: point count, models, backends, sources."""
    used = [p for p in points if p.predicted is not None and not p.inconsistent]
    left = sum(1 for p in points if p.predicted is not None and p.inconsistent)
    models = sorted({p.model for p in used})
    backends = sorted({p.measurement.backend for p in used if p.measurement.backend})
    sources = sorted({accuracy.source_name(p.measurement) for p in used})
    out = (f"{len(used)} measured points ({', '.join(models)}; {', '.join(backends) or 'unknown backend'}) "
           f"from {', '.join(sources)}")
    return out + (f" ({left} faster than the peaks left out)" if left else "")


def _round(x):
    return float(f"{x:.4g}")


def write_calibration(fit, output=None, framework_output=None, date=None):
    """Write the calibration: the fitted GPU factors into a copy of the base hardware profile
    (``output``: its datasheet figures and source comments as they are) and, where framework
    quantities were fitted, those into a copy of the framework profile (``framework_output``,
    default the user's own profile of that name, ``~/.config/simllm/frameworks/NAME.yaml`` on
    Linux, which ``--framework NAME`` then finds before the shipped one). Each fitted line
    carries a provenance comment (the points, models, backend, source, date and the value it
    replaces). Both are written atomically, each checked to load first; neither may lie inside
    simllm's package or shipped presets (:func:`~simllm.config.presets.refuse_protected`).

    ``output`` None writes no hardware profile (allowed when no GPU factor was fitted).

    Returns the paths written: ``(hardware_path or None, framework_path or None)``.
    """
    date = date or datetime.now(timezone.utc).strftime("%Y-%m-%d")
    fitted_on = "" if tuple(fit.metrics) == FIT_METRICS else f" ({'/'.join(m.upper() for m in fit.metrics)} only)"
    what = f"fitted by simllm calibrate on {describe_points(fit.points)}{fitted_on}, {date}"
    base_path = hwyaml.base_path_of(fit.base)
    text = base_path.read_text(encoding="utf-8")
    gpu = {k: v for k, v in fit.factors.items() if k in GPU_FACTORS}
    fw = {k: v for k, v in fit.factors.items() if k in FRAMEWORK_FACTORS}
    gpus = ", ".join(sorted({p.hardware for p in fit.points if p.predicted is not None})) or fit.base.gpu
    text = hwyaml.drop_keys(text, [k for k in FRAMEWORK_OVERRIDE_KEYS if k in fw])
    if gpu:
        text = hwyaml.edit_hardware_yaml(text, [(k, _round(v), f"{what}; was {fit.initial[k]:g}") for k, v in gpu.items()])
        if text is None:
            raise ConfigError("a block-style YAML hardware profile to edit", source=str(base_path))
    out = None
    if output is not None:
        refuse_protected(output, "-o")
        hardware_from_dict(yaml.safe_load(text), str(output))  # refuse to write what would not load
        out = Path(output)
        write_output(out, text)
    elif gpu:
        raise ConfigError("an output hardware YAML (-o) for the fitted GPU factors", key="-o")
    fw_out = None
    if fw:
        profile = fit.framework or load_framework("vllm")
        fw_path = Path(profile.source)
        if not fw_path.is_file():
            raise ConfigError("a framework profile loaded from a file (its text is copied)", key="framework",
                              value=profile.source)
        fw_text = hwyaml.edit_section_yaml(
            fw_path.read_text(encoding="utf-8"),
            [(k, _round(v), f"{what} on {gpus}; was {fit.initial[k]:g}") for k, v in fw.items()],
            "framework")
        if fw_text is None:
            raise ConfigError("a block-style YAML framework profile to edit", source=str(fw_path))
        fw_out = Path(framework_output) if framework_output else user_preset_path("frameworks", fw_path.stem)
        refuse_protected(fw_out, "--framework-output")
        framework_from_dict(yaml.safe_load(fw_text), str(fw_out))
        write_output(fw_out, fw_text)
    return out, fw_out
