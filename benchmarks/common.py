"""Shared, cached inputs for the benchmarks (fixed presets, fixed seeds). Append-only: changing an
input changes every benchmark's history."""
import functools

import numba
import numpy as np

import simllm
from simcore import iteration_time_nb
from simllm.pack import pack_cost_params


@functools.lru_cache(maxsize=None)
def configs(model="llama-3.1-8b", hardware="h100-sxm", tp=1):
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
    """The first ``n`` requests of the bench-1m workload shape (Poisson 20 req/s, uniform
    lengths), drawn with a fixed seed."""
    import dataclasses

    w = simllm.load_workload("bench-1m")
    w = dataclasses.replace(w, num_prompts=n, seed=seed)
    return w, simllm.generate(w)
