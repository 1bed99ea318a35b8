"""Where one SM90 forward CTA spends its time (issue 22's fixed cost), from inside the kernel.

For each latency case of `fa512.tools.bench_grid` (``--case`` substrings; default the 64-key
floor and decode B=1 x 8k), and each prefill or chunked grid point so named (31B heads, e.g.
``--case "prefill 2k causal,prefill 8 x 1k"``: issue 23's short prefills, where a CTA's fixed cost is
large next to its few key blocks), fp8_mma (or ``--kernel``):

1. ``timeline``: the planned variant compiled with `Sm90FwdConfig.timeline` runs ``--runs``
   times, the L2 flushed before each; CTA (0, 0, 0)'s warps stamp the SM clock at every
   trace event (`cute_kernels.diagnostics`): its last occurrence and, for events that repeat
   per key block, its first ("(first)"). Printed: the median cycles after the first warp's
   start, per warp and event, and the global-timer span of the CTA. Every CTA of the grid also
   leaves a record (its SM, global-timer stamps at start, Q ready, epilogue next and done, its
   key blocks: `cute_kernels.diagnostics.cta_records`); printed per run's median: the grid's
   span and how its SM time divides into prologues, block loops, epilogues and the gaps between
   one CTA and the next on an SM (`cta_phase_summary`), the fixed per-CTA cost of issue 23;
   for a fused-combine call also the store / merge-wait / merge split of the epilogue and
   when the last partial was stored against when the CTAs saw every split arrive.
2. ``cuts``: the same call with the kernel cut at its entry (`Sm90FwdConfig.stage`: "launch"
   returns at once, "setup" stops after mbarrier init and setmaxnreg) and whole, each timed
   by CUDA-graph replay over rotated inputs (us per launch): the launch and setup floors under
   the full kernel's time.

GPU only.  PYTHONPATH=python:. python3 profiles/kernel_timeline.py [--case floor] [--kernel fp8_mma]
"""

from __future__ import annotations

import argparse
import statistics
import sys

import torch


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernel", default="fp8_mma", help="fp8_mma | mma16 (fp8 KV) | mma16-bf16")
    ap.add_argument("--case", default="floor,B=1 k=8k", help="comma list of case-name substrings")
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--no-cuts", action="store_true")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("kernel_timeline: needs a CUDA GPU", file=sys.stderr)
        return 2

    from cute_kernels.diagnostics import (CTA_RECORD_WORDS, TIMELINE_WORDS, cta_phase_summary, cta_records,
                                          timeline_lines, timeline_offsets)
    from fa512.backends.registry import BACKENDS
    from fa512.call import make_call
    from fa512.planning.dispatch import make_plan, target_of
    from fa512.planning.validate import check
    from fa512.tools.bench import PROFILE_KERNELS, GraphTimer, profile_latency_inputs, rep_budget

    kernel, kv = PROFILE_KERNELS[args.kernel]
    device = torch.device("cuda")
    l2 = max(torch.cuda.get_device_properties(device).L2_cache_size, 60 << 20)
    flush = torch.empty(4 * l2, dtype=torch.uint8, device=device)
    for case, _, sets in profile_latency_inputs(args.case, kv, device):
        prepared = []
        for c, o in sets:
            problem, fargs = check(make_call(c.q, c.k, c.v, **c.kwargs(), kernel=kernel))
            prepared.append((make_plan(problem, target_of(device), kernel, 0), fargs, o))
        plan = prepared[0][0]
        backend = BACKENDS[plan.kernel]
        print(f"== {case.name} {args.kernel}: {plan.config.with_split(plan.num_splits > 1).key()} "
              f"splits={plan.num_splits} ctas={plan.ctas}", flush=True)

        # 1. the timeline of CTA (0, 0, 0)
        cfg = plan.config.with_(timeline=True)
        buf = torch.zeros(TIMELINE_WORDS + CTA_RECORD_WORDS, dtype=torch.int32, device=device)
        num_sms = torch.cuda.get_device_properties(device).multi_processor_count
        runs, phases = [], []
        for r in range(args.runs + 1):
            p, fa, o = prepared[r % len(prepared)]
            buf.zero_()
            flush.zero_()
            backend.launch(p, fa, o, config=cfg, trace_addr=buf.data_ptr())
            torch.cuda.synchronize()
            if r:  # the first run compiles / loads
                words = buf.tolist()
                runs.append([int(x) & 0xFFFFFFFF for x in words[:TIMELINE_WORDS]])
                phases.append(cta_phase_summary(cta_records(words), num_sms))
        per_run = [timeline_offsets(words) for words in runs]
        median = {k: tuple(statistics.median(r[k][i] for r in per_run if k in r) for i in (0, 1))
                  for k in set().union(*per_run)}
        print(f"   timeline of CTA (0,0,0), median of {len(runs)} runs (L2 flushed before each):")
        for line in timeline_lines(median):
            print("   " + line)
        phases = [p for p in phases if p]
        if phases:
            med = {k: statistics.median(p[k] for p in phases) for k in phases[0]}
            print(f"   every CTA, median of {len(phases)} runs: {med['ctas']:.0f} CTAs with all four stamps on "
                  f"{med['sms']:.0f} SMs, span {med['span_us']:.1f} us; SM time (x {num_sms} SMs x span): "
                  + ", ".join(f"{k} {med[k + '_us']:.0f} us ({100 * med[k + ' share']:.1f}%)"
                              for k in ("prologue", "blocks", "epilogue", "between")))
            if "merge_us" in med:  # the fused combine: the epilogue divided, and the arrival's spread
                print("   the fused combine, every CTA: " + ", ".join(
                    f"{k} {med[k + '_us']:.0f} us" for k in ("store", "merge wait", "merge"))
                    + f"; after the first start: last partial stored {med['last_store_us']:.2f} us, arrival "
                      f"seen first {med['first_arrival_us']:.2f} / last {med['last_arrival_us']:.2f} us")
        print(flush=True)

        # 2. the cuts, by graph replay
        if args.no_cuts:
            continue
        reps = rep_budget(True)
        for stage in ("launch", "setup", "full"):
            scfg = plan.config.with_(stage=stage)
            fns = [(lambda p=p, fa=fa, o=o: backend.launch(p, fa, o, config=scfg)) for p, fa, o in prepared]
            fns[0]()
            torch.cuda.synchronize()
            t = GraphTimer(fns, reps).time()
            print(f"   stage {stage:6s}: {t['us']:7.2f} us per launch (graph replay, {len(fns)} input sets)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
