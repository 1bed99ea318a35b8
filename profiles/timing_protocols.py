"""How much the timing protocol moves a figure on the H200: the fp8 GEMM ceiling and the FP8-suite
timing cases named on the command line, each timed four ways in one process, twice over.

    PYTHONPATH=python:. python3 profiles/timing_protocols.py perf_prefill8192_causal_fp8_mma

Protocols: the mean of 10 calls after 3 warm-up calls (the smoke's timing up to the tenth
session), the mean of 50, the median of 200 calls each between its own CUDA events, and the
medians of that run's first and last 10 calls. Under sustained load the clocks sink, so a short
run reports the boost clocks (results: profiles/results/2026-11-30-h200-s11/README.md).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_mma16_smoke as smoke  # noqa: E402  (the FP8 suite's cases, builders and launch path)
from fa512.tools.bench import event_times  # noqa: E402


def per_call_seconds(fn, iters: int, warmup: int) -> list:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    return [ms * 1e-3 for ms in event_times([fn], iters)]


def mean_seconds(fn, iters: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e-3 / iters


def timed_calls(names: list) -> dict:
    """name -> (launch function, useful FLOPs per call)."""
    n = 8192
    a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()  # column-major B for _scaled_mm
    one = torch.ones((), device="cuda")
    calls = {"fp8 GEMM 8192^3": (lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
                                 2 * 8192**3)}
    cases = {c["name"]: c for c in smoke.fp8_perf_cases()}
    for name in names:
        case = cases[name]
        q, k, v, kw = smoke.build(case)
        kw.pop("case", None)
        backend, plan, args, out = smoke.prepare(q, k, v, kw, case.get("splits", 1), case.get("config"),
                                                 case.get("kernel", "mma16"))
        smoke.precompile(plan)
        flops = smoke.attention_flops(case["q_lens"], case["k_lens"], q.shape[1], case.get("causal", False))
        calls[name] = ((lambda backend=backend, plan=plan, args=args, out=out: backend.launch(plan, args, out)), flops)
    return calls


def main() -> int:
    calls = timed_calls(sys.argv[1:])
    for round_ in range(2):
        for name, (fn, flops) in calls.items():
            rate = lambda seconds: flops / seconds / 1e12  # noqa: E731
            m10, m50 = mean_seconds(fn, 10, 3), mean_seconds(fn, 50, 5)
            t = per_call_seconds(fn, 200, 5)
            print(f"round {round_} {name}: mean of 10 {rate(m10):.0f}, mean of 50 {rate(m50):.0f}, "
                  f"median of 200 {rate(statistics.median(t)):.0f} (first 10 {rate(statistics.median(t[:10])):.0f}, "
                  f"last 10 {rate(statistics.median(t[-10:])):.0f}) TFLOP/s; median call {statistics.median(t) * 1e3:.3f} ms",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
