"""The SLO-constrained search for the best serving configuration (``simllm optimize``;
:func:`simllm.optimize` in Python).

::

    slos = parse_slo("ttft_p99<=2000,tpot_p99<=50")
    res = optimize("llama-3.1-8b", "h100-sxm", ServingConfig(), workload, slos,
                   over={"tp": [1, 2, 4], "replicas": [1, 2], "max_num_seqs": [64, 128, 256]})
    print(format_optimize(res))
    res.answer.serving, res.answer.goodput_per_gpu  # the configuration chosen and why
    pareto(res.rows())                               # throughput per GPU vs per-user speed

(:func:`~simllm.search.pareto.pareto` and the frontiers are in :mod:`simllm.search.pareto`.)

**SLOs.** :func:`parse_slo` reads ``"ttft_p99<=2000,tpot_p99<=50"``: comma-separated
``METRIC OP NUMBER`` with OP one of ``<=``, ``<``, ``>=``, ``>``. METRIC is ``{ttft, tpot, itl,
e2el, queue}_{mean, median, std, pNN}`` (``latency`` for ``e2el``; the other order,
``p99_ttft``, too) -> the summary key ``p99_ttft_ms``, or any summary key itself
(``error_rate``, ``request_throughput``, ...). Milliseconds metrics take an optional ``ms`` or
``s`` unit; fractions (``error_rate``, utilisations, KV-cache usage) an optional ``%``.

**The search.** :func:`optimize` simulates every combination of ``over`` (a cartesian product)
on one workload, in a thread pool (the kernels release the GIL). Each configuration is

- *rejected, does not fit*: :class:`~simllm.errors.SimulatedOOM` (``oom``) or another
  :class:`~simllm.errors.ConfigError` of the simulator (``invalid``: TP not dividing the heads,
  ...), with the message as the reason;
- *rejected, fails the SLOs* (``slo``): simulated, but its summary breaks a constraint (each
  broken one is listed with its value);
- *feasible* (``ok``): meets every constraint.

The answer is the feasible configuration with the best objective:

- ``goodput_per_gpu`` (default): ``request_goodput`` / GPUs, requests per second per GPU that
  meet the per-request SLOs (simulated with ``goodput`` thresholds taken from the SLOs: for TTFT,
  TPOT and E2E latency, the tightest ``<``/``<=`` bound on a percentile or the median; without
  any, every completed request counts, i.e. ``request_throughput``);
- ``cost_per_token``: the lowest cost per million output tokens, ``price x GPUs / 3600 /
  output_throughput x 1e6`` with ``price`` in USD per GPU-hour. Prices come from ``prices``
  (``{"h100-sxm": 2.5}``, keyed by the preset name or path given, or the profile's ``gpu``) or a
  ``price_per_hour`` attribute of the hardware profile, should profiles gain one; any hardware
  without a price is a ConfigError before anything is simulated.

Ties go to fewer GPUs, then higher output tokens/s per GPU, then the order of the grid. Output
tokens/s per GPU is reported alongside either objective. GPUs per configuration =
``tensor_parallel_size x data_parallel_size``.

**Aggregated or disaggregated.** ``over_disagg`` adds a second grid of disaggregated
prefill/decode configurations (:func:`simllm.simulate_disagg`), on the same hardware, workload
and SLOs: ``prefill_instances``, ``decode_instances`` and any pool engine setting as
``prefill_NAME`` / ``decode_NAME`` (``prefill_tp``, ``decode_tp``, ``decode_dp``,
``decode_max_num_seqs``, ...), over the base :class:`~simllm.config.disagg.DisaggConfig`
``disagg`` (its link, first-token mode, pool GPUs). Their GPUs are both pools'. The answer is
the best of both grids; :meth:`OptimizeResult.best_by_mode` gives each grid's best, and the report
says which wins and by how much; :meth:`OptimizeResult.frontier` takes a ``mode`` for each grid's
own frontier (``simllm optimize --plot`` draws both on one figure). ``max_gpus`` is the GPU
budget: configurations over it are rejected (``budget``) without being simulated.
"""
import dataclasses
import difflib
import itertools
import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from simllm.config.disagg import DisaggConfig
from simllm.config.hardware import load_hardware
from simllm.config.model import load_model
from simllm.config.serving import ServingConfig
from simllm.config.speculative import with_tokens
from simllm.config.workload import Workload, generate
from simllm.errors import ConfigError
from simllm.search.pareto import CLI, DERIVED, frontier, per_user_speed
from simllm.sim.results import output_throughput_per_gpu
from simllm.sim.runner import Base, Task, run_simulations
from simllm.sim.slo import SLO, check_slos, goodput_from_slos, parse_slo  # noqa: F401 - SLO: this module's API too
from simllm.sim.stats import paired_difference
from simllm.text import format_number, jsonable, table


def _check_keys(summary, slos):
    known = set(summary) | set(DERIVED)
    for s in slos:
        if s.key not in known:
            numeric = sorted(k for k, v in summary.items() if isinstance(v, (int, float)) and not isinstance(v, bool))
            near = difflib.get_close_matches(s.name, numeric, n=3)
            hint = f"; did you mean {' or '.join(near)}?" if near else ""
            raise ConfigError(f"a metric such as ttft_p99, tpot_mean, e2el_p90, error_rate or a numeric summary key "
                              f"({s.name} is none{hint})", source=CLI, key="--slo", value=s.text)


# ----------------------------------------------------------------------------- the search

#: ``over`` names -> ServingConfig fields (any field name is accepted too; ``hardware`` is a
#: preset name, a YAML path or a HardwareConfig; ``num_speculative_tokens`` the drafts of the base
#: ``speculative_config``, 0 for none: ``simllm.config.speculative.with_tokens``).
OVER_ALIASES = {"tp": "tensor_parallel_size", "replicas": "data_parallel_size", "dp": "data_parallel_size",
                "ep": "expert_parallel_size", "pp": "pipeline_parallel_size"}
OBJECTIVES = ("goodput_per_gpu", "cost_per_token")
#: Workload draws on which the answer and the runner-up are compared (``noise_seeds``).
NOISE_SEEDS = 4
STATUSES = {"ok": "meets the SLOs", "slo": "fails the SLOs", "oom": "does not fit in memory (OOM)",
            "invalid": "invalid configuration", "budget": "over the GPU budget"}
#: ``over_disagg``'s instance counts (the rest are ``prefill_NAME`` / ``decode_NAME``, NAME an
#: ``over`` alias or a ServingConfig field).
POOL_COUNTS = ("prefill_instances", "decode_instances")
MODES = {"agg": "aggregated", "disagg": "disaggregated"}
SPEC_TOKENS = "num_speculative_tokens"
_SERVING_FIELDS = {f.name: f for f in dataclasses.fields(ServingConfig)}
#: Serving fields -> ``simllm run`` flags (for the re-run command line).
RUN_FLAGS = {"tensor_parallel_size": "-tp", "data_parallel_size": "--data-parallel-size",
             "expert_parallel_size": "--expert-parallel-size", "pipeline_parallel_size": "-pp"}


@dataclass
class Candidate:
    """One configuration of the search.

    Attributes
    ----------
    index : int
        Position in the grid (the cartesian product of ``over`` in its order).
    params : dict
        The swept values, under the names ``over`` used (``{"tp": 2, "max_num_seqs": 64}``).
    hardware : str
        The hardware label (preset name or path as given, or the profile's ``gpu``).
    serving : ServingConfig
    gpus : int
        ``tensor_parallel_size x data_parallel_size``.
    status : str
        ``ok``, ``slo``, ``oom`` or ``invalid`` (:data:`STATUSES`).
    reason : str
        Why it was rejected ("" when ``ok``).
    violations : tuple of str
        The SLOs broken (status ``slo``).
    summary : dict or None
        The simulation's summary (None when it could not run).
    goodput_per_gpu, output_throughput_per_gpu, cost_per_million_tokens : float or None
    """

    index: int
    params: dict
    hardware: str
    serving: object
    gpus: int
    status: str = "ok"
    reason: str = ""
    violations: tuple = ()
    summary: dict = None
    goodput_per_gpu: float = None
    output_throughput_per_gpu: float = None
    cost_per_million_tokens: float = None
    price_per_hour: float = None
    hardware_config: object = field(default=None, repr=False)
    disagg: DisaggConfig = None

    @property
    def mode(self):
        """``agg`` (one engine per replica) or ``disagg`` (prefill and decode pools)."""
        return "agg" if self.disagg is None else "disagg"

    @property
    def label(self):
        text = " ".join(f"{k}={v}" for k, v in self.params.items())
        if self.disagg is not None:
            return "P/D " + (text or f"{self.disagg.prefill_instances}P{self.disagg.decode_instances}D")
        return text or self.hardware

    @property
    def simulated(self):
        return self.summary is not None

    @property
    def feasible(self):
        return self.status == "ok"

    def objective_value(self, objective):
        return self.goodput_per_gpu if objective == "goodput_per_gpu" else self.cost_per_million_tokens

    def run_flags(self):
        """The ``simllm run`` engine flags of this configuration (those differing from vLLM's
        defaults); add the search's workload flags to re-run it."""
        default = ServingConfig()
        flags = [f"--hardware {self.hardware}"]
        for name in _SERVING_FIELDS:
            v, d = getattr(self.serving, name), getattr(default, name)
            if v == d:
                continue
            flag = RUN_FLAGS.get(name, "--" + name.replace("_", "-"))
            if name == "speculative_config":
                flags.append(f"{flag} '{json.dumps(v.vllm_dict(), sort_keys=True)}'")
            elif isinstance(v, bool):
                flags.append(flag if v else "--no-" + flag[2:])
            else:
                flags.append(f"{flag} {v}")
        if self.disagg is not None:
            d = self.disagg.to_dict()
            flags += [f"--prefill-instances {d['prefill_instances']}", f"--decode-instances {d['decode_instances']}"]
            for role in ("prefill", "decode"):
                if d[f"{role}_config"]:
                    flags.append(f"--{role}-config '{json.dumps(d[f'{role}_config'], sort_keys=True)}'")
        return " ".join(flags)

    def row(self):
        """A flat dict: the swept values, ``config``, ``hardware``, ``gpus``, ``status``,
        ``meets_slo``, ``error`` (the reason when it could not run) and the metrics."""
        s = self.summary or {}
        out = {"config": self.label, "hardware": self.hardware, "mode": self.mode,
               **{k: _plain(v) for k, v in self.params.items()},
               "gpus": self.gpus, "status": self.status, "meets_slo": self.feasible,
               "error": self.reason if not self.simulated else ""}
        for key in ROW_METRICS:
            out[key] = s.get(key, math.nan) if self.simulated else math.nan
        out["output_throughput_per_gpu"] = self.output_throughput_per_gpu if self.simulated else math.nan
        out["output_throughput_per_user"] = per_user_speed(s) if self.simulated else math.nan
        out["goodput_per_gpu"] = self.goodput_per_gpu if self.simulated else math.nan
        out["cost_per_million_tokens"] = (self.cost_per_million_tokens if self.cost_per_million_tokens is not None
                                          else math.nan)
        return out


#: Summary metrics copied into :meth:`Candidate.row`.
ROW_METRICS = ("tensor_parallel_size", "data_parallel_size", "request_throughput", "request_goodput",
               "output_throughput", "total_token_throughput", "mean_ttft_ms", "p90_ttft_ms", "p99_ttft_ms",
               "mean_tpot_ms", "p90_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "p99_itl_ms", "mean_e2el_ms",
               "p99_e2el_ms", "error_rate", "kv_cache_usage_peak", "num_preemptions")


def _plain(v):
    if hasattr(v, "gpu") and hasattr(v, "memory_size_bytes"):
        return v.gpu
    return v


@dataclass
class OptimizeResult:
    """What :func:`optimize` returns.

    Attributes
    ----------
    objective : str
        ``goodput_per_gpu`` or ``cost_per_token``.
    slos : tuple of SLO
    goodput : dict or None
        The per-request thresholds the simulations used.
    over : dict
        The swept values, as given (hardware as labels).
    candidates : tuple of Candidate
        Every configuration, in grid order.
    ranked : tuple of Candidate
        The feasible ones, best first.
    answer : Candidate or None
        ``ranked[0]``; None when no configuration meets the SLOs.
    top : int
        How many of ``ranked`` the report shows (the answer included).
    model : str
    workload : str
        The workload's description.
    margin : Margin or None
        The answer's lead over the runner-up across workload seeds (None with fewer than two
        feasible configurations, one seed or a trace).
    """

    objective: str
    slos: tuple
    goodput: dict
    over: dict
    candidates: tuple
    ranked: tuple
    answer: Candidate
    top: int
    model: str
    workload: str
    percentiles: tuple = (50, 90, 99)
    margin: "Margin" = None

    @property
    def runner_ups(self):
        """The feasible configurations after the answer, up to ``top`` in all with it."""
        return self.ranked[1:max(self.top, 1)]

    @property
    def rejected(self):
        return tuple(c for c in self.candidates if not c.feasible)

    def rejected_counts(self):
        """``{status: n}`` over the rejected, and ``{slo_text: n}`` of the SLOs they break, as
        ``(by_status, by_slo)``."""
        by_status, by_slo = {}, {}
        for c in self.rejected:
            by_status[c.status] = by_status.get(c.status, 0) + 1
            if c.status == "slo":
                for s in self.slos:
                    if not s.met(c.summary):
                        by_slo[s.text] = by_slo.get(s.text, 0) + 1
        return by_status, by_slo

    def better_rejected(self):
        """Simulated configurations whose objective beats the answer's but that fail the SLOs
        (every simulated one that fails them when there is no answer)."""
        sign = -1.0 if self.objective == "cost_per_token" else 1.0
        out = []
        for c in self.candidates:
            if c.status != "slo":
                continue
            v = c.objective_value(self.objective)
            if self.answer is None:
                out.append(c)
            elif v is not None and sign * v > sign * self.answer.objective_value(self.objective):
                out.append(c)
        return out

    def rows(self):
        """One flat dict per candidate, in grid order (:meth:`Candidate.row`), for
        :func:`simllm.search.pareto.pareto` and :func:`simllm.report.plots.plot_frontier`."""
        return [c.row() for c in self.candidates]

    @property
    def modes(self):
        """The modes searched, in :data:`MODES` order (``("agg",)`` without ``over_disagg``)."""
        present = {c.mode for c in self.candidates}
        return tuple(m for m in MODES if m in present)

    def best_by_mode(self):
        """``{mode: the best feasible Candidate of that grid, or None}`` for each mode searched."""
        return {m: next((c for c in self.ranked if c.mode == m), None) for m in self.modes}

    def frontier(self, kind="speed", mode=None):
        """Indices (into :meth:`rows`) of the simulated configurations on frontier ``kind``
        (:func:`simllm.search.pareto.frontier`); with ``mode`` (``agg`` or ``disagg``), of that
        grid's configurations only."""
        rows = self.rows()
        if mode is None:
            return frontier(rows, kind)
        keep = [i for i, c in enumerate(self.candidates) if c.mode == mode]
        return [keep[j] for j in frontier([rows[i] for i in keep], kind)] if keep else []


def _label_of(h):
    if hasattr(h, "gpu") and hasattr(h, "memory_size_bytes"):
        return h.gpu
    return str(h)


def _load_hardware(h):
    if hasattr(h, "gpu") and hasattr(h, "memory_size_bytes"):
        return h
    return load_hardware(str(h))


def _axes(over, base_hardware):
    """(name, field, values) per axis, hardware (when swept) as (label, HardwareConfig) pairs."""
    over = dict(over or {})
    hw_list = base_hardware if isinstance(base_hardware, (list, tuple)) else [base_hardware]
    axes = []
    for name, values in over.items():
        fld = "hardware" if name == "hardware" else OVER_ALIASES.get(name, name)
        if fld not in ("hardware", SPEC_TOKENS) and fld not in _SERVING_FIELDS:
            raise ConfigError("hardware, tp, replicas, num_speculative_tokens or a ServingConfig field (max_num_seqs, "
                              "max_num_batched_tokens, dtype, kv_cache_dtype, ...)", source=CLI, key="--over",
                              value=name)
        values = [values] if isinstance(values, (str, int, float)) else list(values)
        if not values:
            raise ConfigError(f"at least one value for {name}", source=CLI, key="--over", value=name)
        axes.append((name, fld, values))
    if not any(f == "hardware" for _, f, _ in axes):
        if any(h is None for h in hw_list) or not hw_list:
            raise ConfigError("a hardware preset (base_hardware or over['hardware'])", source=CLI, key="--hardware")
        if len(hw_list) > 1:
            axes.insert(0, ("hardware", "hardware", list(hw_list)))
    hw_fixed = None
    resolved = []
    for name, fld, values in axes:
        if fld == "hardware":
            values = [(_label_of(h), _load_hardware(h)) for h in values]
        resolved.append((name, fld, values))
    if not any(f == "hardware" for _, f, _ in resolved):
        hw_fixed = (_label_of(hw_list[0]), _load_hardware(hw_list[0]))
    return resolved, hw_fixed


def _price(label, hw, prices):
    prices = prices or {}
    for k in (label, hw.gpu, Path(label).stem):
        if k in prices:
            return float(prices[k])
    p = getattr(hw, "price_per_hour", None)
    return float(p) if p else None


def _rank_key(objective):
    def key(c):
        v = c.objective_value(objective)
        primary = v if objective == "cost_per_token" else -v
        return (primary, c.gpus, -(c.output_throughput_per_gpu or 0.0), c.index)
    return key


def optimize(base_model, base_hardware, base_serving=None, workload=None, slo=None, over=None,
             objective="goodput_per_gpu", executor=None, top=5, *, prices=None, goodput=None,
             percentiles=(50, 90, 99), max_workers=None, progress=None, scheduler=None, chunk_size=None,
             over_disagg=None, disagg=None, max_gpus=0, noise_seeds=NOISE_SEEDS):
    """Search the grid ``over`` for the configuration that meets ``slo`` best.

    Parameters
    ----------
    base_model : str or ModelConfig
        A preset name, a file, or a loaded model.
    base_hardware : str, HardwareConfig or a sequence of them
        The hardware; several make a ``hardware`` axis (first in the grid) unless ``over`` has
        one, which then replaces it.
    base_serving : ServingConfig, optional
        Engine settings the swept values replace (vLLM's defaults).
    workload : Workload, optional
        The same requests for every configuration (drawn once).
    slo : str, sequence of str or of SLO
        See :func:`parse_slo`; none makes every configuration that runs feasible.
    over : dict
        ``{"tp": [1, 2, 4, 8], "replicas": [1, 2], "max_num_seqs": [...],
        "max_num_batched_tokens": [...], "dtype": [...], "hardware": [...]}``: ``tp`` ->
        ``tensor_parallel_size``, ``replicas`` (or ``dp``) -> ``data_parallel_size``, any other
        ServingConfig field by its name, ``hardware`` -> preset names, files or HardwareConfig.
        The grid is the cartesian product, in the dict's order.
    objective : str
        ``goodput_per_gpu`` (highest ``request_goodput`` / GPUs) or ``cost_per_token`` (lowest
        USD per million output tokens; needs a price for every hardware).
    executor : str or concurrent.futures.Executor, optional
        Where the simulations run (:func:`simllm.sim.runner.run_many`): ``threads`` (default, the
        kernels release the GIL), ``processes``, ``dask`` (with ``scheduler``) or an executor
        (used, not shut down). Default: a pool of ``max_workers`` threads (the CPU count), made
        and shut down here; one worker runs in this thread.
    top : int
        How many feasible configurations the report shows, the answer included.
    prices : dict, optional
        USD per GPU-hour by hardware preset name (or path, or profile ``gpu``), e.g.
        ``{"h100-sxm": 2.5}``; a profile's ``price_per_hour`` is used where this has none.
    goodput : dict, optional
        Per-request thresholds for ``request_goodput`` (ms), replacing those derived from the
        SLOs (:func:`goodput_from_slos`).
    percentiles : sequence of float
        Percentiles computed (those the SLOs name are added).
    progress : callable, optional
        Called as ``progress(done, total)`` as configurations finish.
    scheduler : str, optional
        A dask scheduler's address (``executor="dask"``; default a local cluster).
    chunk_size : int, optional
        Configurations per task (default: about 50 ms of simulation).
    over_disagg : dict, optional
        A grid of disaggregated configurations searched beside ``over``'s:
        ``{"prefill_instances": [1, 2], "decode_instances": [1], "prefill_tp": [4, 8],
        "decode_tp": [8]}`` (``prefill_NAME`` / ``decode_NAME``: a pool's ``over`` alias or
        ServingConfig field), on every hardware of the search.
    disagg : DisaggConfig, optional
        The base of ``over_disagg``'s configurations (its link, first-token mode, pool GPUs and
        overrides); given without ``over_disagg``, it is the one disaggregated configuration.
    max_gpus : int
        The GPU budget (0: none): configurations over it are rejected unsimulated (``budget``).
    noise_seeds : int
        Workload draws on which the answer and the runner-up are compared (the search's own
        and ``noise_seeds - 1`` more): the result's ``margin`` says whether the answer's lead is
        beyond two standard errors of the paired differences or a tie. 1 (or a trace, which
        has no other draw) leaves the margin out.

    Returns
    -------
    OptimizeResult

    Raises
    ------
    ConfigError
        A bad SLO, ``over`` name or value, objective, a missing price, an unknown preset, or an
        SLO naming no summary key. Configurations that do not fit are not errors: they are
        rejected with the reason.
    """
    if objective not in OBJECTIVES:
        raise ConfigError("one of " + ", ".join(OBJECTIVES), source=CLI, key="--objective", value=objective)
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise ConfigError("a positive integer", source=CLI, key="--top", value=top)
    if isinstance(noise_seeds, bool) or not isinstance(noise_seeds, int) or not 1 <= noise_seeds <= 100:
        raise ConfigError("an integer in [1, 100] (1: no noise check)", source=CLI, key="--noise-seeds",
                          value=noise_seeds)
    if isinstance(max_gpus, bool) or not isinstance(max_gpus, int) or max_gpus < 0:
        raise ConfigError("a GPU count >= 0 (0: no budget)", source=CLI, key="--max-gpus", value=max_gpus)
    slos = tuple(parse_slo(slo))
    if goodput is None:
        goodput = goodput_from_slos(slos)
    pcts = sorted({float(p) for p in percentiles} | {s.percentile for s in slos if s.percentile is not None})
    pcts = tuple(int(p) if p == int(p) else p for p in pcts)
    if hasattr(base_model, "num_attention_heads"):
        model, model_label = base_model, base_model.name
    else:
        model, model_label = load_model(str(base_model)), str(base_model)
    base_serving = base_serving or ServingConfig()
    workload = workload or Workload()
    axes, hw_fixed = _axes(over, base_hardware)

    hardware_used = [hw_fixed] if hw_fixed else next(v for _, f, v in axes if f == "hardware")
    price_of = {}
    for label, hw in hardware_used:
        price_of[label] = _price(label, hw, prices)
        if objective == "cost_per_token" and price_of[label] is None:
            raise ConfigError(f"a price_per_hour (USD per GPU-hour) for hardware preset {label!r}, which has none: "
                              f"--objective cost_per_token needs one per hardware; give --price {label}=USD "
                              f"(prices={{{label!r}: USD}} from Python)", source=CLI, key="--price")

    configs = []
    names = [a[0] for a in axes]
    for i, combo in enumerate(itertools.product(*[a[2] for a in axes])):
        params, changes = {}, {}
        label, hw = hw_fixed if hw_fixed else (None, None)
        for (name, fld, _), value in zip(axes, combo):
            if fld == "hardware":
                label, hw = value
                params[name] = label
            elif fld == SPEC_TOKENS:
                params[name] = value
                changes["speculative_config"] = with_tokens(base_serving.speculative_config, value, "--over " + name)
            else:
                params[name] = value
                changes[fld] = value
        try:
            serving = replace(base_serving, **changes)
        except ConfigError as exc:  # a bad swept value is the user's input, not a misfit
            raise ConfigError(f"valid values for {', '.join(names)}: {exc}", source=CLI, key="--over") from None
        except TypeError as exc:
            raise ConfigError(f"values of the right type ({exc})", source=CLI, key="--over") from None
        configs.append(Candidate(index=i, params=params, hardware=label, serving=serving,
                                 gpus=serving.num_gpus,
                                 price_per_hour=price_of.get(label), hardware_config=hw))

    if over_disagg or disagg is not None:
        configs += _disagg_candidates(over_disagg or {}, disagg or DisaggConfig(), base_serving, hardware_used,
                                      price_of, prices, objective, len(configs))
    for c in configs:
        if max_gpus and c.gpus > max_gpus:
            c.status, c.reason = "budget", f"{c.gpus} GPUs, over the budget of {max_gpus}"
    todo = [c for c in configs if c.status != "budget"]

    requests = generate(workload)  # one draw, shared (read-only) by every simulation
    base = Base(model=model, workload=workload, requests=requests, percentiles=pcts, goodput=goodput)
    checked = []

    def check_first(out):
        if not checked:
            first = next((o.value for _, o in out if o.ok), None)
            if first is not None:
                _check_keys(first, slos)  # a misspelt --slo fails on the first summary, not the last
                checked.append(True)

    runs = run_simulations(base, [Task(hardware=c.hardware_config, serving=c.serving, disagg=c.disagg) for c in todo],
                           executor, workers=max_workers, scheduler=scheduler, chunk_size=chunk_size,
                           progress=progress, on_chunk=check_first)
    done = {c.index: (o.value, o.status, o.error) for c, o in zip(todo, runs)}
    outcomes = [(c, *done.get(c.index, (None, c.status, c.reason))) for c in configs]

    for c, summary, status, reason in outcomes:
        c.status, c.reason = status, reason
        if summary is None:
            continue
        c.summary = summary
        c.goodput_per_gpu = _goodput_per_gpu(summary, c.gpus)
        c.output_throughput_per_gpu = float(output_throughput_per_gpu(summary))
        if c.price_per_hour is not None:
            c.cost_per_million_tokens = _cost_per_million(summary, c.gpus, c.price_per_hour)
        broken = check_slos(summary, slos)
        if broken:
            c.status, c.violations = "slo", tuple(broken)
            c.reason = ", ".join(broken)
    candidates = tuple(c for c, *_ in outcomes)
    ranked = tuple(sorted((c for c in candidates if c.feasible), key=_rank_key(objective)))
    searched = {name: [v[0] if isinstance(v, tuple) else v for v in values] for name, _, values in axes}
    searched.update({name: list(values) for name, values in (over_disagg or {}).items()})
    margin = None
    if len(ranked) > 1 and noise_seeds > 1 and not workload.trace:
        margin = _runner_up_margin(base, ranked[0], ranked[1], objective, noise_seeds, executor, max_workers,
                                   scheduler)
    return OptimizeResult(
        objective=objective, slos=slos, goodput=goodput, over=searched,
        candidates=candidates, ranked=ranked, answer=ranked[0] if ranked else None, top=top,
        model=model_label, workload=workload.describe(), percentiles=pcts, margin=margin,
    )


def _goodput_per_gpu(summary, gpus):
    return float(summary.get("request_goodput", summary.get("request_throughput", 0.0))) / gpus


def _cost_per_million(summary, gpus, price_per_hour):
    tok_h = float(summary["output_throughput"]) * 3600.0
    return price_per_hour * gpus / tok_h * 1e6 if tok_h > 0 else math.inf


def _objective_of(summary, c, objective):
    """``objective``'s value for candidate ``c`` from one of its summaries."""
    if objective == "goodput_per_gpu":
        return _goodput_per_gpu(summary, c.gpus)
    return _cost_per_million(summary, c.gpus, c.price_per_hour)


def _runner_up_margin(base, answer, runner_up, objective, seeds, executor, max_workers, scheduler):
    """The answer's lead over the runner-up across ``seeds`` workload draws (the search's own and
    ``seeds - 1`` more, each seed's requests shared by both: common random numbers):
    :class:`Margin`."""
    workload = base.workload
    more = [int(x.generate_state(1)[0]) for x in np.random.SeedSequence(workload.seed).spawn(seeds - 1)]
    va = [answer.objective_value(objective)]
    vb = [runner_up.objective_value(objective)]
    for seed in more:
        w = replace(workload, seed=seed)
        b = replace(base, workload=w, requests=generate(w))
        tasks = [Task(hardware=c.hardware_config, serving=c.serving, disagg=c.disagg) for c in (answer, runner_up)]
        oa, ob = run_simulations(b, tasks, executor, workers=max_workers, scheduler=scheduler)
        if not (oa.ok and ob.ok):
            return None  # a draw on which one could not run: no margin to give
        va.append(_objective_of(oa.value, answer, objective))
        vb.append(_objective_of(ob.value, runner_up, objective))
    mean, se = paired_difference(va, vb)
    ref = float(np.mean(vb))
    sign = 1.0 if objective == "goodput_per_gpu" else -1.0  # a lead is more goodput, or a lower cost
    if not ref or not math.isfinite(ref):
        return None
    lead_pct = sign * mean / abs(ref) * 100.0
    noise_pct = 2.0 * se / abs(ref) * 100.0
    return Margin(seeds=seeds, lead_pct=lead_pct, noise_pct=noise_pct, tie=abs(lead_pct) <= noise_pct)


@dataclass(frozen=True)
class Margin:
    """The answer's lead over the runner-up across workload seeds: ``lead_pct`` (mean of the
    paired differences, percent of the runner-up's mean; positive: the answer is better),
    ``noise_pct`` (two standard errors of that mean, percent) and ``tie`` (the lead is within
    the noise: the two are not told apart by these draws)."""

    seeds: int
    lead_pct: float
    noise_pct: float
    tie: bool

    def to_dict(self):
        return {"seeds": self.seeds, "lead_pct": self.lead_pct, "noise_pct": self.noise_pct, "tie": self.tie}


def _disagg_field(name):
    """``over_disagg`` name -> ``prefill_instances`` / ``decode_instances`` or ``(role, field)``;
    None when it names neither."""
    if name in POOL_COUNTS:
        return name
    role, _, rest = name.partition("_")
    fld = OVER_ALIASES.get(rest, rest)
    return (role, fld) if role in ("prefill", "decode") and fld in _SERVING_FIELDS else None


_DISAGG_NAMES = ("prefill_instances, decode_instances, or prefill_NAME / decode_NAME with NAME tp, dp, ep or a "
                 "ServingConfig field (prefill_tp, decode_max_num_seqs, ...)")


def _disagg_candidates(over_disagg, base, base_serving, hardware_used, price_of, prices, objective, start):
    """The disaggregated grid's candidates (indices from ``start``), on every hardware searched."""
    axes = []
    for name, values in over_disagg.items():
        fld = _disagg_field(name)
        if fld is None:
            raise ConfigError(_DISAGG_NAMES, source=CLI, key="--over-disagg", value=name)
        values = [values] if isinstance(values, (str, int, float)) else list(values)
        if not values:
            raise ConfigError(f"at least one value for {name}", source=CLI, key="--over-disagg", value=name)
        axes.append((name, fld, values))
    out = []
    # A pool that names its own GPU is priced by that preset's name (loaded once, not per candidate).
    own = {role: _price(getattr(base, f"{role}_gpu"), load_hardware(getattr(base, f"{role}_gpu")), prices)
           for role in ("prefill", "decode") if getattr(base, f"{role}_gpu")}
    for label, hw in hardware_used:
        role_price = {role: own.get(role, price_of.get(label)) for role in ("prefill", "decode")}
        for combo in itertools.product(*[a[2] for a in axes]):
            params = {"hardware": label} if len(hardware_used) > 1 else {}
            counts = {k: getattr(base, k) for k in POOL_COUNTS}
            pools = {role: dict(getattr(base, role)) for role in ("prefill", "decode")}
            for (name, fld, _), value in zip(axes, combo):
                params[name] = value
                if isinstance(fld, tuple):
                    pools[fld[0]][fld[1]] = value
                else:
                    counts[fld] = value
            try:
                d = replace(base, **counts, **{role: tuple(sorted(v.items())) for role, v in pools.items()})
                servings = {role: d.pool_serving(base_serving, role) for role in pools}
            except ConfigError as exc:  # a bad swept value is the user's input, not a misfit
                raise ConfigError(f"valid values for {', '.join(a[0] for a in axes)}: {exc}", source=CLI,
                                  key="--over-disagg") from None
            gpus = {role: getattr(d, f"{role}_instances") * sv.num_gpus
                    for role, sv in servings.items()}
            price = _pools_price(d, label, gpus, role_price, objective)
            out.append(Candidate(index=start + len(out), params=params, hardware=label, serving=base_serving,
                                 gpus=sum(gpus.values()), price_per_hour=price, hardware_config=hw, disagg=d))
    return out


def _pools_price(d, label, gpus, role_price, objective):
    """USD per GPU-hour of a disaggregated configuration: its pools' prices (``role_price``),
    GPU-weighted; None when a pool has none (an error under ``cost_per_token``)."""
    total = 0.0
    for role, n in gpus.items():
        price = role_price[role]
        if price is None:
            if objective == "cost_per_token":
                raise ConfigError(f"a price_per_hour for the {role} pool's hardware "
                                  f"{getattr(d, f'{role}_gpu') or label!r}", source=CLI, key="--price")
            return None
        total += price * n
    return total / sum(gpus.values())


def grid_size(over, hardware=(), over_disagg=None, disagg=False):
    """How many configurations :func:`optimize` simulates for ``over`` (and the hardware list,
    an axis when ``over`` has none and it holds several), with ``over_disagg``'s grid (or the
    one ``disagg`` configuration) on every hardware."""
    n = math.prod(len(v) if isinstance(v, (list, tuple)) else 1 for v in (over or {}).values())
    hw = hardware if isinstance(hardware, (list, tuple)) else [hardware]
    n_hw = len((over or {}).get("hardware", ())) or len(hw)
    n = n * (len(hw) if "hardware" not in (over or {}) and len(hw) > 1 else 1)
    if over_disagg or disagg:
        n += n_hw * math.prod(len(v) if isinstance(v, (list, tuple)) else 1 for v in (over_disagg or {}).values())
    return n


# ----------------------------------------------------------------------------- rendering

def _objective_text(objective):
    return "goodput per GPU" if objective == "goodput_per_gpu" else "cost per million output tokens"


def _metric_line(c, objective):
    s = c.summary
    parts = [f"goodput {format_number(c.goodput_per_gpu)} req/s per GPU ({format_number(s.get('request_goodput', s['request_throughput']))}"
             f" req/s on {c.gpus} GPU{'s' if c.gpus != 1 else ''})",
             f"output {format_number(c.output_throughput_per_gpu)} tok/s per GPU",
             f"{format_number(per_user_speed(s))} tok/s per user"]
    if c.cost_per_million_tokens is not None:
        parts.append(f"${c.cost_per_million_tokens:,.3f} per M output tokens at ${c.price_per_hour:g}/GPU-hour")
    lat = [f"TTFT P99 {format_number(s.get('p99_ttft_ms'))} ms", f"TPOT P99 {format_number(s.get('p99_tpot_ms'))} ms",
           f"E2E P99 {format_number(s.get('p99_e2el_ms'))} ms", f"error rate {format_number(100 * s.get('error_rate', 0.0), 1)}%"]
    return ", ".join(parts), ", ".join(lat)


def _why(result):
    a = result.answer
    feasible = len(result.ranked)
    what = "highest goodput per GPU" if result.objective == "goodput_per_gpu" else "lowest cost per output token"
    text = [f"{what} of the {feasible} configuration{'s' if feasible != 1 else ''} meeting the SLOs"]
    if len(result.ranked) > 1:
        nxt = result.ranked[1]
        va, vn = a.objective_value(result.objective), nxt.objective_value(result.objective)
        unit = "req/s per GPU" if result.objective == "goodput_per_gpu" else "$/M tok"
        if va == vn:
            text.append(f"ties with {nxt.label} at {format_number(vn, 3)} {unit}, broken by fewer GPUs, then more output "
                        f"tok/s per GPU, then grid order")
        else:
            rel = (va / vn - 1.0) * 100 if vn else math.inf
            text.append(f"next best {nxt.label}: {format_number(vn, 3)} {unit} ({rel:+.1f}%)")
        m = result.margin
        if m is not None:
            verdict = ("within noise: a tie, these draws do not tell them apart" if m.tie
                       else "beyond noise")
            text.append(f"across {m.seeds} workload seeds it leads by {m.lead_pct:+.1f}% ± {m.noise_pct:.1f}% "
                        f"(two standard errors): {verdict}")
    better = result.better_rejected()
    if better:
        listed = "; ".join(f"{c.label}: {c.reason}" for c in better[:3])
        more = f"; and {len(better) - 3} more" if len(better) > 3 else ""
        text.append(f"{len(better)} configuration{'s' if len(better) != 1 else ''} with better "
                    f"{_objective_text(result.objective)} fail{'s' if len(better) == 1 else ''} the SLOs "
                    f"({listed}{more})")
    return "; ".join(text)


def _layout(c):
    """``TP=2 x DP=1 = 2 GPUs``, or a disaggregated candidate's pools."""
    plural = "s" if c.gpus != 1 else ""
    if c.disagg is None:
        pp = f" x PP={c.serving.pipeline_parallel_size}" if c.serving.pipeline_parallel_size > 1 else ""
        return f"TP={c.serving.tensor_parallel_size}{pp} x DP={c.serving.data_parallel_size} = {c.gpus} GPU{plural}"
    parts = []
    for role in ("prefill", "decode"):
        sv = c.disagg.pool_serving(c.serving, role)
        parts.append(f"{getattr(c.disagg, f'{role}_instances')} {role} x TP={sv.tensor_parallel_size} x "
                     f"DP={sv.data_parallel_size}")
    return " + ".join(parts) + f" = {c.gpus} GPU{plural}"


def _mode_verdict(result):
    """Which of the aggregated and disaggregated grids wins on the objective, and by how much."""
    best = result.best_by_mode()
    unit = "req/s per GPU" if result.objective == "goodput_per_gpu" else "$/M tok"
    missing = [MODES[m] for m, c in best.items() if c is None]
    if missing:
        return f"no {' or '.join(missing)} configuration meets the SLOs"
    a, d = best["agg"], best["disagg"]
    va, vd = a.objective_value(result.objective), d.objective_value(result.objective)
    win, lose, vw, vl = (d, a, vd, va) if result.ranked.index(d) < result.ranked.index(a) else (a, d, va, vd)
    rel = (vw / vl - 1.0) * 100 if result.objective == "goodput_per_gpu" and vl else (1.0 - vw / vl) * 100 if vl else math.inf
    better = "more" if result.objective == "goodput_per_gpu" else "cheaper"
    return (f"{MODES[win.mode]} wins: {win.label} {format_number(vw, 3)} {unit} against the best "
            f"{MODES[lose.mode]} {lose.label} {format_number(vl, 3)} ({rel:.1f}% {better})")


def format_optimize(result, max_rejected=20, after_top=""):
    """The search as text: the answer with its metrics, why, and how to re-run it; the top
    feasible configurations (followed by ``after_top``, a section of text such as their error
    bands); the rejected ones counted by reason (and listed, up to ``max_rejected``)."""

    slos = ", ".join(s.text for s in result.slos) or "(none)"
    n = len(result.candidates)
    by_status, by_slo = result.rejected_counts()
    out = [f"simllm optimize: {result.model}, {result.workload}",
           f"SLOs: {slos}; objective: {_objective_text(result.objective)}"
           + (f"; per-request goodput thresholds: {', '.join(f'{k} {v:g} ms' for k, v in result.goodput.items())}"
              if result.goodput else ""),
           f"{n} configuration{'s' if n != 1 else ''}: {len(result.ranked)} meet the SLOs, "
           f"{by_status.get('slo', 0)} fail them, {by_status.get('oom', 0)} do not fit (OOM), "
           f"{by_status.get('invalid', 0)} invalid"
           + (f", {by_status['budget']} over the GPU budget" if by_status.get("budget") else ""), ""]
    a = result.answer
    if a is None:
        out.append("no configuration meets the SLOs (the rejected are below)")
    else:
        m1, m2 = _metric_line(a, result.objective)
        out += [f"answer: {a.label} ({a.hardware}, {_layout(a)})",
                f"  {m1}", f"  {m2}", f"  why: {_why(result)}"]
        if len(result.modes) > 1:
            out.append(f"  aggregated or disaggregated: {_mode_verdict(result)}")
        out.append(f"  re-run: simllm run --model {result.model} {a.run_flags()} (plus this search's workload flags)")
    shown = result.ranked[:result.top]
    if shown:
        cost = result.objective == "cost_per_token" or any(c.cost_per_million_tokens is not None for c in shown)
        headers = ["rank", "configuration", "GPUs", "goodput/GPU (req/s)", "out tok/s/GPU", "tok/s/user",
                   "TTFT P99 (ms)", "TPOT P99 (ms)"] + (["$/M tok"] if cost else [])
        rows = []
        for i, c in enumerate(shown, 1):
            s = c.summary
            rows.append([i, c.label, c.gpus, format_number(c.goodput_per_gpu, 3), format_number(c.output_throughput_per_gpu),
                         format_number(per_user_speed(s)), format_number(s.get("p99_ttft_ms")), format_number(s.get("p99_tpot_ms"))]
                        + ([format_number(c.cost_per_million_tokens, 3)] if cost else []))
        out += ["", f"top {len(shown)} meeting the SLOs:", table(headers, rows, "rlr" + "r" * (len(headers) - 3))]
    if after_top:
        out += ["", after_top]
    rejected = result.rejected
    if rejected:
        counts = ", ".join(f"{STATUSES[k]}: {v}" for k, v in by_status.items())
        out += ["", f"rejected: {len(rejected)} ({counts})"]
        if by_slo:
            out.append("  SLOs broken: " + ", ".join(f"{k}: {v}" for k, v in by_slo.items()))
        for c in rejected[:max_rejected]:
            out.append(f"  {c.label}: {STATUSES[c.status]}: {c.reason}")
        if len(rejected) > max_rejected:
            out.append(f"  ... and {len(rejected) - max_rejected} more")
    return "\n".join(out)


def _candidate_dict(c, full=False):

    d = {"index": c.index, "label": c.label, "params": {k: _plain(v) for k, v in c.params.items()},
         "hardware": c.hardware, "mode": c.mode, "gpus": c.gpus, "status": c.status, "reason": c.reason,
         "violations": list(c.violations), "goodput_per_gpu": c.goodput_per_gpu,
         "output_throughput_per_gpu": c.output_throughput_per_gpu,
         "output_throughput_per_user": per_user_speed(c.summary) if c.summary else None,
         "cost_per_million_tokens": c.cost_per_million_tokens, "price_per_hour": c.price_per_hour,
         "serving": dataclasses.asdict(c.serving)}
    if c.disagg is not None:
        d["disagg"] = c.disagg.to_dict()
    if c.summary is not None:
        d["summary"] = dict(c.summary) if full else {k: c.summary.get(k) for k in ROW_METRICS}
    return jsonable(d)


def optimize_to_dict(result):
    """JSON-ready: ``objective``, ``slos`` (name, key, op, value), ``goodput``, ``over``,
    ``answer`` (with its full summary; None when none meets the SLOs), ``why``, ``top`` (the
    feasible ones shown, best first), ``rejected_counts`` (by status, by SLO) and ``candidates``
    (every configuration in grid order with its status, reason and key metrics)."""

    by_status, by_slo = result.rejected_counts()
    return jsonable({
        "model": result.model,
        "workload": result.workload,
        "objective": result.objective,
        "slos": [{"name": s.name, "key": s.key, "op": s.op, "value": s.value} for s in result.slos],
        "goodput": result.goodput,
        "over": {k: [_plain(v) for v in vs] for k, vs in result.over.items()},
        "answer": _candidate_dict(result.answer, full=True) if result.answer else None,
        "why": _why(result) if result.answer else "no configuration meets the SLOs",
        "runner_up_margin": result.margin.to_dict() if result.margin else None,
        "top": [_candidate_dict(c) for c in result.ranked[:result.top]],
        **({"best_by_mode": {m: _candidate_dict(c) if c else None for m, c in result.best_by_mode().items()},
            "mode_verdict": _mode_verdict(result)} if len(result.modes) > 1 else {}),
        "rejected_counts": {"by_status": by_status, "by_slo": by_slo},
        "candidates": [_candidate_dict(c) for c in result.candidates],
    })


# ----------------------------------------------------------------------------- CLI parsing

def _over_value(fld, text, item, flag="--over"):
    if fld == "hardware":
        return text
    typ = int if fld in POOL_COUNTS or fld == SPEC_TOKENS else _SERVING_FIELDS[fld].type
    try:
        if typ is bool or typ == "bool":
            if text.lower() not in ("true", "false", "1", "0", "on", "off", "yes", "no"):
                raise ValueError
            return text.lower() in ("true", "1", "on", "yes")
        if typ is int or typ == "int":
            f = float(text)
            if f != int(f):
                raise ValueError
            return int(f)
        if typ is float or typ == "float":
            return float(text)
    except ValueError:
        kind = {bool: "true or false", int: "integers", float: "numbers"}.get(typ, "values")
        raise ConfigError(f"NAME=V1,V2,... with {kind} for {fld}", source=CLI, key=flag, value=item) from None
    return text


def parse_over(items):
    """``["tp=1,2,4", "dtype=bf16,fp8", "hardware=h100-sxm,h200-sxm"]`` -> the ``over`` dict of
    :func:`optimize`, values typed by their ServingConfig field.

    Raises
    ------
    ConfigError
        Naming ``--over`` and the bad item.
    """
    out = {}
    for item in items or ():
        name, eq, values = item.partition("=")
        name = name.strip()
        texts = [v.strip() for v in values.split(",")]
        if not eq or not name or not all(texts):
            raise ConfigError("NAME=V1,V2,... (e.g. tp=1,2,4 max_num_seqs=64,128)", source=CLI, key="--over", value=item)
        fld = "hardware" if name == "hardware" else OVER_ALIASES.get(name, name)
        if fld not in ("hardware", SPEC_TOKENS) and fld not in _SERVING_FIELDS:
            raise ConfigError("hardware, tp, replicas, num_speculative_tokens or a ServingConfig field (max_num_seqs, "
                              "max_num_batched_tokens, dtype, kv_cache_dtype, ...) =V1,V2,...", source=CLI,
                              key="--over", value=item)
        if name in out:
            raise ConfigError(f"each name once ({name} is given twice)", source=CLI, key="--over", value=item)
        out[name] = [_over_value(fld, t, item) for t in texts]
    return out


def parse_over_disagg(items):
    """``["prefill_instances=1,2", "decode_tp=4,8"]`` -> the ``over_disagg`` dict of
    :func:`optimize`, values typed by their field.

    Raises
    ------
    ConfigError
        Naming ``--over-disagg`` and the bad item.
    """
    out = {}
    for item in items or ():
        name, eq, values = item.partition("=")
        name = name.strip()
        texts = [v.strip() for v in values.split(",")]
        fld = _disagg_field(name)
        if not eq or not name or not all(texts) or fld is None:
            raise ConfigError(_DISAGG_NAMES + " =V1,V2,...", source=CLI, key="--over-disagg", value=item)
        if name in out:
            raise ConfigError(f"each name once ({name} is given twice)", source=CLI, key="--over-disagg", value=item)
        out[name] = [_over_value(fld[1] if isinstance(fld, tuple) else fld, t, item, "--over-disagg") for t in texts]
    return out


def parse_prices(items):
    """``["h100-sxm=2.5", ...]`` -> ``{"h100-sxm": 2.5}`` (USD per GPU-hour).

    Raises
    ------
    ConfigError
        Naming ``--price`` and the bad item.
    """
    out = {}
    for item in items or ():
        name, eq, value = item.rpartition("=")
        try:
            price = float(value)
        except ValueError:
            price = math.nan
        if not eq or not name.strip() or not (math.isfinite(price) and price > 0):
            raise ConfigError("HARDWARE=USD_PER_GPU_HOUR with a positive number, e.g. h100-sxm=2.5", source=CLI,
                              key="--price", value=item)
        out[name.strip()] = price
    return out
