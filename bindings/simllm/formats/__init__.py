"""simllm.formats: the files of other tools, read and written.

Owns reading measured results (vLLM bench serve, GuideLLM, EvalScope, genai-perf/AIPerf,
aiconfigurator's CSV: :mod:`.measurements`) and writing simulated results in their formats
(:mod:`.exports`).

May import: :mod:`simllm.sim`, :mod:`simllm.config` and the foundation modules.
"""
