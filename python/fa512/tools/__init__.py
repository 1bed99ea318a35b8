"""User tooling behind ``python -m fa512 <tool>``.

- `fa512.tools.ab`: accuracy A/B of every kernel that can run here, plus the CPU numeric
  emulations of each FP8 design, against the float64 reference (table, JSON, PNG plots).
- `fa512.tools.bench`: ceilings measured in the same run (bf16 and fp8 GEMM, copy bandwidth),
  then each kernel on the prefill / chunked-prefill / decode grid (GPU only).

``profiles/nsys_run.py`` (outside the package) profiles one workload under nsys, ncu or
torch.profiler. Each tool module exposes ``add_arguments(parser)`` and ``main(args) -> int``;
nothing heavy is imported until ``main`` runs.
"""
