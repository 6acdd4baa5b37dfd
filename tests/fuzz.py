"""Random configurations through :func:`simllm.simulate`, checking the invariants every result must
hold (issue 16): used by tests/sim/test_invariants.py (a few hundred draws under hypothesis and
a seeded sample) and runnable as a script for the large runs::

    python tests/fuzz.py --n 20000            # valid configurations: no invariant violated
    python tests/fuzz.py --n 2000 --extreme   # extreme values: no hang, no traceback

Each configuration either runs, and its summary and per-request rows pass :func:`violations`, or
is refused with a :class:`simllm.ConfigError` (a one-line message); anything else is a failure.
The script prints the counts and every failure's configuration, and exits 1 on any.
"""
import argparse
import dataclasses
import math
import signal
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if __name__ == "__main__":  # run as a script, tests/ is first on the path and its simcore/ would shadow the package
    sys.path[:] = [str(ROOT), str(ROOT / "bindings")] + [p for p in sys.path
                                                         if Path(p or ".").resolve() != ROOT / "tests"]

import simllm  # noqa: E402
from simcore import codes  # noqa: E402
from simllm.config.workload import fixed, random_range  # noqa: E402

MODELS = ("llama-3.1-8b", "qwen2.5-7b", "mixtral-8x7b", "gemma-3-27b", "deepseek-v3", "gpt-oss-20b", "jalapeno",
          "qwen3-30b-a3b", "qwen2.5-0.5b", "llama-4-scout")
HARDWARE = ("h100-sxm", "a100-sxm-80gb", "l40s", "b200", "custom-gpu", "mi300x")
#: Per-request tolerance of TTFT <= E2E and of fractions <= 1 (float rounding of sums of times).
EPS = 1e-9


def _choice(rng, options):
    return options[int(rng.integers(len(options)))]


def random_case(rng, extreme=False):
    """One (model, hardware, serving, workload) drawn from ``rng``; ``extreme`` pushes counts, rates
    and lengths to the edges of their ranges."""
    model = simllm.load_model(_choice(rng, MODELS))
    hardware = simllm.load_hardware(_choice(rng, HARDWARE))
    if rng.random() < 0.1:
        model = dataclasses.replace(model, kv_cache_enabled=False)
    heads = model.num_attention_heads
    tps = [t for t in (1, 2, 4, 8) if heads % t == 0]
    batching = _choice(rng, ("continuous", "continuous", "continuous", "static", "dynamic"))
    serving = dict(
        tensor_parallel_size=_choice(rng, tps),
        data_parallel_size=int(_choice(rng, (1, 1, 2, 3))),
        max_num_seqs=int(_choice(rng, (1, 4, 32, 256) + ((2, 1024, 2**20) if extreme else ()))),
        max_num_batched_tokens=int(_choice(rng, (0, 512, 2048, 8192) + ((1, 16, 2**30) if extreme else ()))),
        block_size=int(_choice(rng, (16, 16, 32, 1) + ((4096, 65536) if extreme else ()))),
        enable_chunked_prefill=bool(rng.random() < 0.8),
        enable_prefix_caching=bool(rng.random() < 0.3),
        gpu_memory_utilization=float(_choice(rng, (0.9, 0.5, 0.95, 0.3) + ((1e-3, 1.0) if extreme else ()))),
        batching=batching,
        batch_window_ms=float(_choice(rng, (0.0, 10.0, 100.0))),
        batch_max=int(_choice(rng, (0, 4, 16))),
        router=_choice(rng, ("round_robin", "least_outstanding")),
    )
    if batching == "continuous" and rng.random() < 0.15 and model.kv_cache_enabled:
        serving["speculative_config"] = {"method": "ngram", "num_speculative_tokens": int(rng.integers(1, 6)),
                                         "synthetic_acceptance_length": float(rng.uniform(1.0, 3.0))}
    elif batching == "continuous" and rng.random() < 0.1:
        serving["pipeline_parallel_size"] = 2
    n = int(rng.integers(1, 120)) if not extreme or rng.random() < 0.5 else int(_choice(rng, (1, 2, 5000)))
    rate = _choice(rng, (math.inf, 1.0, 10.0, 100.0) + ((1e-6, 1e9) if extreme else ()))
    longest = 4096 if not extreme else 131072
    lengths = [int(_choice(rng, (1, 16, 100, 1000, longest))) for _ in range(2)]
    ratio = float(_choice(rng, (0.0, 0.5, 0.9)))
    workload = dict(
        num_prompts=n, request_rate=rate, max_concurrency=int(_choice(rng, (0, 0, 1, 8, 64) + ((100_000,) if extreme else ()))),
        input_len=random_range(lengths[0], ratio) if ratio else fixed(lengths[0]),
        output_len=random_range(lengths[1], ratio) if ratio else fixed(lengths[1]),
        seed=int(rng.integers(0, 2**31)), timeout_s=float(_choice(rng, (0.0, 0.0, 0.5, 30.0) + ((1e-6, 1e9) if extreme else ()))),
        prefix_len=int(_choice(rng, (0, 0, 64))), prefix_hit_ratio=float(_choice(rng, (0.0, 0.5, 1.0))),
        warmup_requests=int(_choice(rng, (0, 0, 3))))
    return model, hardware, serving, workload


def violations(result, workload):
    """The invariants ``result`` breaks (empty when none): figures finite, counts adding up,
    fractions in [0, 1], every request's times ordered."""
    s = result.summary
    out = []
    for key, value in s.items():
        if isinstance(value, (float, np.floating)) and not math.isfinite(value):
            out.append(f"{key} = {value}")
    n = s["num_requests"]
    if s["completed"] + s["failed"] != n:
        out.append(f"completed {s['completed']} + failed {s['failed']} != submitted {n}")
    for key in ("compute_utilization", "bandwidth_utilization", "gpu_busy_fraction", "kv_cache_usage_mean",
                "kv_cache_usage_peak", "error_rate"):
        v = s.get(key)
        if v is not None and not -EPS <= v <= 1.0 + EPS:
            out.append(f"{key} = {v} outside [0, 1]")
    for key, v in s.items():
        if key.endswith("_ms") and isinstance(v, (int, float, np.floating)) and v < 0:
            out.append(f"{key} = {v} < 0")
    req = result.requests
    if req is not None:
        done = req["status"] == codes.STATUS_DONE
        ttft, e2el = req["ttft_s"][done], req["e2el_s"][done]
        bad = ttft > e2el * (1 + EPS) + EPS
        if bad.any():
            out.append(f"{int(bad.sum())} requests with TTFT > E2E")
        gen = int(req["output_tokens"][done & ~req["warmup"].astype(bool)].sum())
        if gen != s["total_output_tokens"]:
            out.append(f"output tokens {gen} != total_output_tokens {s['total_output_tokens']}")
    return out


def run_case(case):
    """Simulate ``case``; returns ("ok", []), ("refused", [message]) or ("violated", [...])."""
    model, hardware, serving, workload = case
    try:
        workload = simllm.Workload(**workload)
        result = simllm.simulate(model, hardware, simllm.ServingConfig(**serving), workload)
    except simllm.ConfigError as exc:
        text = str(exc)
        return "refused", [text] if "\n" not in text else ["multi-line error: " + text]
    bad = violations(result, workload)
    return ("violated" if bad else "ok"), bad


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--extreme", action="store_true")
    ap.add_argument("--timeout-s", type=float, default=60.0, help="per configuration: longer is a hang")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    counts = {"ok": 0, "refused": 0, "violated": 0, "error": 0, "hang": 0}

    def alarm(*_):
        raise TimeoutError

    signal.signal(signal.SIGALRM, alarm)
    start = time.perf_counter()
    for i in range(args.n):
        case = random_case(rng, args.extreme)
        signal.setitimer(signal.ITIMER_REAL, args.timeout_s)
        try:
            kind, detail = run_case(case)
        except TimeoutError:
            kind, detail = "hang", [f"over {args.timeout_s:g} s"]
        except Exception as exc:  # noqa: BLE001 - a traceback is what this script looks for
            kind, detail = "error", [f"{type(exc).__name__}: {exc}"]
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        counts[kind] += 1
        if kind in ("violated", "error", "hang") or (kind == "refused" and detail[0].startswith("multi-line")):
            model, hardware, serving, workload = case
            print(f"#{i} {kind}: {'; '.join(detail)}\n    {model.name} on {hardware.gpu} {serving} {workload}",
                  flush=True)
    wall = time.perf_counter() - start
    print(f"{args.n} {'extreme' if args.extreme else 'valid'} configurations in {wall:.0f} s: "
          + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return 1 if counts["violated"] or counts["error"] or counts["hang"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
