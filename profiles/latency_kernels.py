"""The GPU kernels one latency call launches and how long each runs (issue 22).

For each latency case of `fa512.tools.bench_grid` (or ``--case`` substrings): eager calls over
rotated input sets (the L2 cold, as the bench), recorded by `torch.profiler`; prints, per kernel
name, launches per call and the mean device time (CUPTI's kernel start-to-end), and the mean
gap between one kernel's end and the next one's start inside a call. Device time alone, without
the launch gaps a graph replay also has, is what the kernel itself costs. GPU only.

    PYTHONPATH=python:. python3 profiles/latency_kernels.py [--kernel fp8_mma] [--case floor] [--splits 1,8]
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict

import torch


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernel", default="fp8_mma", help="fp8_mma | mma16 (fp8 KV) | mma16-bf16")
    ap.add_argument("--case", default="", help="comma list of case-name substrings (default: all)")
    ap.add_argument("--splits", default="0", help="comma list of num_splits (0: the plan's)")
    ap.add_argument("--calls", type=int, default=40)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("latency_kernels: needs a CUDA GPU", file=sys.stderr)
        return 2

    import fa512
    from fa512.tools.bench import PROFILE_KERNELS, profile_latency_inputs
    from torch.profiler import ProfilerActivity, profile

    kernel, kv = PROFILE_KERNELS[args.kernel]
    device = torch.device("cuda")
    for case, _, sets in profile_latency_inputs(args.case, kv, device):
        for s in [int(x) for x in args.splits.split(",")]:
            calls = [(lambda c=c, o=o: fa512.attention(c.q, c.k, c.v, **c.kwargs(), out=o, kernel=kernel, num_splits=s))
                     for c, o in sets]
            plan = fa512.plan(sets[0][0].q, sets[0][0].k, sets[0][0].v, **sets[0][0].kwargs(), kernel=kernel, num_splits=s)
            for fn in calls:
                fn()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for i in range(args.calls):
                    calls[i % len(calls)]()
                    torch.cuda.synchronize()  # one call at a time: its kernels' gaps are its own
            kernels = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                             key=lambda e: e.time_range.start)
            per = defaultdict(list)
            for e in kernels:
                per[e.name].append(e.time_range.end - e.time_range.start)
            print(f"== {case.name} {args.kernel} splits={plan.num_splits} ctas={plan.ctas} "
                  f"({len(kernels) / args.calls:.1f} kernels per call)")
            for name, ds in sorted(per.items(), key=lambda x: -sum(x[1])):
                print(f"   {len(ds) / args.calls:4.1f}x {sum(ds) / len(ds):8.2f} us  {name[:110]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
