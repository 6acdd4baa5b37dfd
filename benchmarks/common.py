"""Shared, cached inputs for the benchmarks: fixed presets and seeds. Append-only: changing an
input changes every benchmark's history, so add new inputs instead of editing these."""
import dataclasses
import functools

import numba
import numpy as np

import simllm
from simcore import iteration_time_nb
from simllm.sim.pack import pack_cost_params

BENCH_MODEL = "llama-3.1-8b"
BENCH_HARDWARE = "h100-sxm"


@functools.lru_cache(maxsize=None)
def configs(model=BENCH_MODEL, hardware=BENCH_HARDWARE, tp=1):
    """(model, hardware, serving, packed cost params)."""
    m = simllm.load_model(model)
    h = simllm.load_hardware(hardware)
    s = simllm.ServingConfig(tensor_parallel_size=tp)
    return m, h, s, pack_cost_params(m, h, s)


@functools.lru_cache(maxsize=None)
def decode_batches(n=100_000, seed=0):
    """n decode iterations: batch sizes 1..256 and mean contexts 100..4000 tokens."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 257, n).astype(np.float64)
    ctx = sizes * rng.uniform(100, 4000, n)
    return sizes, ctx


@numba.njit(cache=True, nogil=True)
def time_many_nb(p, sizes, ctx):
    """Sum of iteration_time_nb over decode batches (the engine's inner call)."""
    total = 0.0
    for i in range(sizes.shape[0]):
        total += iteration_time_nb(p, sizes[i], ctx[i] + sizes[i], ctx[i] + sizes[i], sizes[i])
    return total


@functools.lru_cache(maxsize=None)
def bench_requests(n, seed=0):
    """The first ``n`` requests of the bench-1m workload (Poisson 20 req/s, prompts uniform in
    [100, 1000), outputs in [20, 400)), drawn with a fixed seed: (workload, requests)."""
    w = dataclasses.replace(simllm.load_workload("bench-1m"), num_prompts=n, seed=seed)
    return w, simllm.generate(w)


@functools.lru_cache(maxsize=None)
def closed_loop_requests(n, clients=256, seed=0):
    """bench-1m's lengths sent by ``clients`` concurrent clients (closed loop)."""
    w = dataclasses.replace(simllm.load_workload("bench-1m"), num_prompts=n, seed=seed, request_rate=float("inf"),
                            max_concurrency=clients)
    return w, simllm.generate(w)
