"""Where a split decode call's time goes (issue 22): the whole call against its forward alone.

For each latency case of `fa512.tools.bench_grid` (or ``--case`` substrings) and fp8_mma (or
``--kernel``), times by CUDA-graph replay with the L2 cold (input sets rotated as the bench
does, `bench_grid.latency_sets`):

- ``call``: the op as the plan runs it (forward + split combine);
- ``fwd``: the same split forward without the combine (`fa512.launch.partials`);
- ``unsplit``: the call with num_splits=1 (one CTA per tile, no partials);
- ``copy``: the device copy of the same bytes (read + write), timed before and after.

``call - fwd`` is what the combine costs after the forward (PDL overlaps its launch), ``fwd`` at
64 keys (the floor case) the fixed cost of one forward. GPU only; prints one line per case.

``--sweep 16,32,64,...``: instead, the call at each of those split counts (and the planned one),
by the same graph replay, one line per case: the measurements a refit of the planner's time
model (`fa512.planning.splits`) needs.

    PYTHONPATH=python:. python3 profiles/split_breakdown.py [--kernel fp8_mma] [--case MTP,decode]
    PYTHONPATH=python:. python3 profiles/split_breakdown.py --kernel mma16-bf16 --sweep 8,16,24,32,48,64,128
"""

from __future__ import annotations

import argparse
import sys

import torch


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernel", default="fp8_mma", help="fp8_mma | mma16 (fp8 KV) | mma16-bf16")
    ap.add_argument("--case", default="", help="comma list of case-name substrings (default: all)")
    ap.add_argument("--quick", action="store_true", help="shorter timing budgets")
    ap.add_argument("--sweep", default="", help="comma list of num_splits to time the call at (see above)")
    ap.add_argument("--precision", default="auto", choices=("auto", "fast", "accurate"),
                    help="fp8_mma's numerics (`fa512.attention`'s precision); the other kernels ignore it")
    ap.add_argument("--config", default="", help="an experiment: Sm90FwdConfig fields every plan of this "
                    "process takes, e.g. tile_n=32,kv_stages=2 (see override_configs)")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("split_breakdown: needs a CUDA GPU", file=sys.stderr)
        return 2

    import fa512
    from fa512.call import make_call
    from fa512.contract import MAX_SPLITS
    from fa512.launch.partials import partials
    from fa512.tools.bench import PROFILE_KERNELS, GraphTimer, copy_timer, profile_latency_inputs, rep_budget

    kernel, kv = PROFILE_KERNELS[args.kernel]
    if args.config:
        override_configs(args.config)
    device = torch.device("cuda")
    reps = rep_budget(args.quick)
    sweep = sorted({int(x) for x in args.sweep.split(",") if x})
    if sweep:
        print(f"{'case':30s} {'plan':>5s} {'copy us':>8s}  call us at num_splits = ...")
    else:
        print(f"{'case':30s} {'splits':>6s} {'CTAs':>5s} {'call us':>8s} {'fwd us':>8s} {'unsplit':>8s} {'copy us':>8s}")
    for case, w, sets in profile_latency_inputs(args.case, kv, device):
        first = sets[0][0]
        plan = fa512.plan(first.q, first.k, first.v, **first.kwargs(), kernel=kernel, precision=args.precision)
        splits = plan.num_splits

        def call(c, o, s=0):
            return lambda: fa512.attention(c.q, c.k, c.v, **c.kwargs(), out=o, kernel=kernel, num_splits=s,
                                           precision=args.precision)

        def fwd(c):
            return lambda: partials(make_call(c.q, c.k, c.v, **c.kwargs(), kernel=kernel, num_splits=splits,
                                              precision=args.precision))

        if sweep:
            counts = sorted({splits, *(n for n in sweep if 1 <= n <= MAX_SPLITS)})
            timers = {n: [call(c, o, n) for c, o in sets] for n in counts}
        else:
            timers = {"call": [call(c, o) for c, o in sets], "fwd": [fwd(c) for c, _ in sets],
                      "unsplit": [call(c, o, 1) for c, o in sets]}
        for fns in timers.values():  # compile and warm outside the captures
            fns[0]()
        torch.cuda.synchronize()
        copy = copy_timer(w["bytes"], len(sets), device, reps)
        before = copy.time()["us"]
        us = {name: GraphTimer(fns, reps).time()["us"] for name, fns in timers.items()}
        after = copy.time()["us"]
        if sweep:
            cells = "  ".join(f"{n}:{t:.2f}" + ("*" if n == splits else "") for n, t in us.items())
            print(f"{case.name:30s} {splits:5d} {(before + after) / 2:8.2f}  {cells}", flush=True)
            continue
        print(f"{case.name:30s} {splits:6d} {plan.ctas:5d} {us['call']:8.2f} {us['fwd']:8.2f} {us['unsplit']:8.2f} "
              f"{(before + after) / 2:8.2f}", flush=True)
    return 0


def override_configs(text: str) -> None:
    """Make every SM90 config this process plans take the fields of ``text`` ("a=1,b=x"), so
    a variant that no dispatch row selects can be timed against the planned one (an A/B for a
    change to `cute_kernels.variants.default_config`). Plans are made after this."""
    import dataclasses

    import cute_kernels.variants as variants

    fields = {}
    for item in text.split(","):
        key, _, value = item.partition("=")
        fields[key.strip()] = int(value) if value.strip().lstrip("-").isdigit() else value.strip()
    planned = variants.default_config

    def default_config(**kwargs):
        config = dataclasses.replace(planned(**kwargs), **fields)
        ok, why = config.can_implement()
        if not ok:
            raise SystemExit(f"split_breakdown: --config {text}: {why}")
        return config

    variants.default_config = default_config
    print(f"config override: {fields}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
