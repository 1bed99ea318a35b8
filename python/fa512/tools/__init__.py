"""User tooling behind ``python -m fa512 <tool>``.

- `fa512.tools.ab`: accuracy A/B of every kernel that can run here, plus the CPU numeric
  emulations of each FP8 design, against the float64 reference (table, JSON, PNG plots).
- `fa512.tools.bench`: ceilings measured in the same run (bf16 and fp8 GEMM, copy bandwidth),
  then each kernel on the prefill / chunked-prefill / decode grid and the latency cases (small
  decode and MTP calls by CUDA-graph replay, L2 cold, next to the copy of the same bytes) (GPU
  only); `fa512.tools.bench_grid` defines what it measures and prints it (``bench --list``).
- `fa512.tools.fuzz`: seeded random calls over the whole contract (layouts, strides, masks,
  descales, splits, garbage in memory the call does not own), each kernel against the float64
  reference (fp8_mma also against its emulation); a one-line repro per failure.

``profiles/nsys_run.py`` (outside the package) profiles one workload under nsys, ncu or
torch.profiler. Each tool module exposes ``add_arguments(parser)`` and ``main(args) -> int``;
nothing heavy is imported until ``main`` runs.
"""
