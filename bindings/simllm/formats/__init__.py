"""simllm.formats: the files of other tools, read and written, one module per tool.

Per tool, its reader and its writer together: :mod:`.vllm_bench` (vllm bench serve result JSON),
:mod:`.guidellm` (benchmarks.json), :mod:`.evalscope` (perf benchmark_summary.json, read),
:mod:`.genai_perf` (genai-perf and AIPerf profile exports and tables of genai-perf runs, read),
:mod:`.aiconfigurator` (silicon_sample.csv, read), :mod:`.trtllm_bench` (TensorRT-LLM's
static-batch benchmark tables, read), :mod:`.table` (simllm's own summary and per-request tables).
Beneath them :mod:`.common` (the Measurement row and what several tools share); above them the
dispatch: :mod:`.measurements` (which tool wrote a measured file, read into Measurement rows) and
:mod:`.exports` (which writer a file name and format ask for). A tool's module never imports
another tool's.

May import: :mod:`simllm.sim`, :mod:`simllm.config` and the foundation modules.
"""
