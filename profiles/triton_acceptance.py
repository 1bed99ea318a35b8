"""GPU acceptance of the Triton d512 forward (issue 3): ceilings, correctness, speed, in one run.

Run from the repository root on a CUDA machine::

    PYTHONPATH=python:. python3 profiles/triton_acceptance.py [--sweep] [--out DIR]

1. Ceilings measured in the same run: bf16 GEMM 8192^3 through torch.matmul and device-to-device
   copy bandwidth (bytes read + written); medians of CUDA-event timings after warm-up, random data.
2. Correctness against `fa512.attention_ref` (float64, fed the same K/V values) on Gemma-4 head
   shapes (Hq/Hkv = 32/4, 16/2, 8/1): prefill causal / local / non-causal, decode, chunked
   prefill; bf16 and fp16 Q; fp8 (with descales) and 16-bit K/V. Bars: rel L2 of out <= 3e-3
   where PV runs in bf16 (bf16 K/V), <= 2e-3 where it runs in fp16; lse abs error <= 1e-3.
3. Speed: decode B=64 x seqused_k=8192 fp8 (Hq=32/Hkv=4) and decode B=4 x 32768 (auto splits) as
   fractions of copy bandwidth counting the fp8 K/V bytes (target >= 60%); causal prefill of 8192
   tokens with bf16 K/V as a fraction of the GEMM rate (target >= 25%; FLOPs = 4 * 512 * Hq *
   visible keys summed over rows). Several input sets are rotated so L2 does not flatter
   decode; eager (CUDA events) and CUDA-graph replay times are both reported.
With --sweep, each speed case is also timed under a few alternative tile configs.
Compiles run first in a pool of worker processes (the Triton disk cache then serves the main
process), so one device call covers every variant. Logs go to $OUT (or --out); a table is
printed last.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
import traceback
import zlib

import torch

D = 512
DEVICE = "cuda"
# (q_lens, k_lens, page_size) of the correctness modes.
LENS = {
    "prefill": ([1100, 517], [1100, 517], 0),
    "decode": ([1] * 8, [4000, 1, 0, 2500, 777, 4096, 63, 3001], 16),
    "chunked": ([300, 129], [2000, 700], 32),  # a new chunk attending to a cached prefix
}
HEADS = [(32, 4), (16, 2), (8, 1)]
OUT_TOL = {"bf16": 3e-3, "fp16": 2e-3}  # by PV dtype
LSE_TOL = 1e-3


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------


def make_inputs(q_lens, k_lens, hq, hkv, q_dtype, kv_dtype, page_size, seed, device=None):
    """Random (never zero) inputs; paged with shuffled pages if page_size, else packed K/V."""
    device = device or DEVICE
    gen = torch.Generator(device=device).manual_seed(seed)
    b = len(q_lens)
    cu_q = torch.tensor([0] + torch.tensor(q_lens).cumsum(0).tolist(), dtype=torch.int32, device=device)
    total_q = sum(q_lens)
    q = torch.randn(total_q, hq, D, generator=gen, device=device).to(q_dtype)
    kw = dict(cu_seqlens_q=cu_q, seqused_k=torch.tensor(k_lens, dtype=torch.int32, device=device),
              max_seqlen_q=max(q_lens), max_seqlen_k=max(k_lens))
    fp8 = kv_dtype == torch.float8_e4m3fn

    def kv(shape):
        x = torch.randn(shape, generator=gen, device=device)
        return (x * 16).to(kv_dtype) if fp8 else x.to(kv_dtype)  # fp8 holds x * 16; descale 1/16

    if page_size:
        max_pages = max(1, max(-(-n // page_size) for n in k_lens))
        num_pages = b * max_pages
        k, v = kv((num_pages, page_size, hkv, D)), kv((num_pages, page_size, hkv, D))
        perm = torch.randperm(num_pages, generator=gen, device=device)
        kw["page_table"] = perm.view(b, max_pages).to(torch.int32)
    else:
        cu_k = torch.tensor([0] + torch.tensor(k_lens).cumsum(0).tolist(), dtype=torch.int32, device=device)
        k, v = kv((sum(k_lens), hkv, D)), kv((sum(k_lens), hkv, D))
        kw["cu_seqlens_k"] = cu_k
    if fp8:
        kw["k_descale"] = (torch.rand(b, hkv, generator=gen, device=device) * 0.5 + 0.75) / 16
        kw["v_descale"] = (torch.rand(hkv, generator=gen, device=device) * 0.5 + 0.75) / 16
        kw["q_descale"] = torch.tensor(1.1, device=device)
    return q, k, v, kw


def correctness_cases():
    cases = []
    for hq, hkv in HEADS:
        for mode in ("prefill_causal", "prefill_local", "prefill_full", "decode", "chunked"):
            for qn in ("bf16", "fp16"):
                for kvn in ("fp8", "16"):
                    cases.append(dict(hq=hq, hkv=hkv, mode=mode, q=qn, kv=kvn))
    # Gemma-4 passes softmax_scale = 1.0 on QK-normed inputs: peaky softmax.
    for hq, hkv in HEADS:
        cases.append(dict(hq=hq, hkv=hkv, mode="decode", q="bf16", kv="fp8", scale=1.0))
        cases.append(dict(hq=hq, hkv=hkv, mode="prefill_causal", q="bf16", kv="16", scale=1.0))
    return cases


def run_correctness(case):
    import fa512

    q_dtype = torch.bfloat16 if case["q"] == "bf16" else torch.float16
    kv_dtype = torch.float8_e4m3fn if case["kv"] == "fp8" else q_dtype
    mode = case["mode"]
    extra = {}
    q_lens, k_lens, page = LENS[mode.split("_")[0]]
    if mode in ("prefill_causal", "chunked"):
        extra["causal"] = True
    elif mode == "prefill_local":
        extra.update(window_left=300, window_right=40)
    seed = zlib.crc32(repr(sorted(case.items())).encode()) % 10000
    q, k, v, kw = make_inputs(q_lens, k_lens, case["hq"], case["hkv"], q_dtype, kv_dtype, page, seed)
    # Gemma's QK-normed scale 1.0 needs unit-RMS q and k: shrink q so logits keep a std of ~2-4.
    scale = case.get("scale", D ** -0.5)
    if "scale" in case:
        q = (q.float() * 0.15).to(q_dtype)
    out = torch.full_like(q, float("nan"))
    o, lse = fa512.attention(q, k, v, out=out, kernel="triton", softmax_scale=scale, **kw, **extra)
    plan_splits = fa512.launch.run.last_launch["num_splits"]
    ro, rl = fa512.attention_ref(q, k, v, softmax_scale=scale, **kw, **extra)
    err = ((o.double() - ro).norm() / ro.norm()).item()
    fin = torch.isfinite(rl)
    lse_err = (lse.double()[fin] - rl[fin]).abs().max().item() if fin.any() else 0.0
    inf_ok = bool(torch.equal(torch.isinf(lse), torch.isinf(rl)))
    nan = bool(torch.isnan(o).any() or torch.isnan(lse).any())
    pv = "bf16" if kv_dtype == torch.bfloat16 else "fp16"
    ok = (err <= OUT_TOL[pv]) and (lse_err <= LSE_TOL) and inf_ok and not nan
    return dict(case, rel_l2=err, lse_err=lse_err, pv=pv, splits=plan_splits, ok=ok, inf_ok=inf_ok, nan=nan)


# ---------------------------------------------------------------------------------------------
# Speed cases
# ---------------------------------------------------------------------------------------------

SPEED = {
    "decode_b64_8k_fp8": dict(q_lens=[1] * 64, k_lens=[8192] * 64, kv="fp8", page=64, sets=4),
    "decode_b4_32k_fp8": dict(q_lens=[1] * 4, k_lens=[32768] * 4, kv="fp8", page=64, sets=4),
    "prefill_8k_causal_bf16": dict(q_lens=[8192], k_lens=[8192], kv="bf16", page=0, sets=1, causal=True),
    # Not acceptance bars: vLLM's usual page size, and a 16-bit-KV decode, for the record.
    "decode_b64_8k_fp8_page16": dict(q_lens=[1] * 64, k_lens=[8192] * 64, kv="fp8", page=16, sets=4),
    "decode_b64_8k_bf16": dict(q_lens=[1] * 64, k_lens=[8192] * 64, kv="bf16", page=64, sets=2),
    "decode_b16_8k_fp8": dict(q_lens=[1] * 16, k_lens=[8192] * 16, kv="fp8", page=64, sets=4),
}

# Alternative configs timed with --sweep ("splits" forces a split count).
SWEEP = {
    "decode_b64_8k_fp8": [dict(lazy_rescale=False)],
    "decode_b4_32k_fp8": [dict(splits=16), dict(splits=32)],
    "decode_b16_8k_fp8": [dict(splits=4)],
    "prefill_8k_causal_bf16": [dict(lazy_rescale=False)],
}


def kernel_breakdown(name, changes=None, iters=8):
    """Mean device time per launch of each Triton kernel (torch.profiler), in microseconds."""
    from fa512.backends import triton_fwd
    from torch.profiler import ProfilerActivity, profile

    sets, _, _ = speed_setup(name, changes)
    for plan, args, out in sets:
        triton_fwd.launch(plan, args, out)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(iters):
            plan, args, out = sets[i % len(sets)]
            triton_fwd.launch(plan, args, out)
        torch.cuda.synchronize()
    rows = {}
    for ev in prof.key_averages():
        if "kernel" in ev.key and ev.count:
            t = getattr(ev, "device_time_total", None) or getattr(ev, "cuda_time_total", 0)
            rows[ev.key] = (ev.count, t / ev.count)
    return rows


def speed_setup(name, changes=None, max_sets=None):
    """(plans_and_args per input set, bytes, flops) for one speed case and config change."""
    import fa512
    from fa512.planning import splits as fsplits
    from fa512.call import default_bounds
    from fa512.call import Call
    from fa512.planning.validate import check
    spec = SPEED[name]
    q_dtype = torch.bfloat16
    kv_dtype = torch.float8_e4m3fn if spec["kv"] == "fp8" else torch.bfloat16
    sets = []
    for i in range(min(spec["sets"], max_sets or spec["sets"])):
        q, k, v, kw = make_inputs(spec["q_lens"], spec["k_lens"], 32, 4, q_dtype, kv_dtype, spec["page"], 1000 + i)
        if kv_dtype == torch.bfloat16:
            kw.pop("q_descale", None)
        kw["causal"] = spec.get("causal", False)
        kw["softmax_scale"] = D ** -0.5
        plan = fa512.plan(q, k, v, kernel="triton", **kw)
        msq, msk, scale = default_bounds(q, k, kw.get("page_table"), kw["max_seqlen_q"],
                                         kw["max_seqlen_k"], kw["softmax_scale"])
        problem, args = check(Call(q, k, v, None, kw.get("page_table"), kw.get("cu_seqlens_k"), kw["cu_seqlens_q"], msq,
                                 kw["seqused_k"], msk, scale, kw["causal"], -1, -1, kw.get("q_descale"),
                                 kw.get("k_descale"), kw.get("v_descale"), 0, "triton"))
        changes = dict(changes or {})
        forced_splits = changes.pop("splits", None)
        cfg = dataclasses.replace(plan.config, **changes)
        if forced_splits is not None:
            n_splits = forced_splits
        elif changes:
            n_splits = fsplits.plan_num_splits(
                batch=problem.batch, num_kv_heads=4, group_size=8, max_seqlen_q=msq, max_seqlen_k=msk,
                window_left=-1, window_right=0 if kw["causal"] else -1, num_sms=plan.target.num_sms,
                block_m=cfg.block_m, block_n=cfg.block_n, kv_elem_bytes=kv_dtype.itemsize,
                ctas_per_sm=cfg.ctas_per_sm).num_splits
        else:
            n_splits = plan.num_splits
        plan = dataclasses.replace(plan, config=cfg, num_splits=n_splits)
        sets.append((plan, args, torch.empty_like(q)))
    kv_bytes = 2 * sum(spec["k_lens"]) * 4 * D * kv_dtype.itemsize
    visible = sum(sum(min(kl, kl - ql + i + 1) for i in range(ql)) if spec.get("causal") else ql * kl
                  for ql, kl in zip(spec["q_lens"], spec["k_lens"]))
    flops = 4 * D * 32 * visible
    return sets, kv_bytes, flops


def warm_speed(name, changes):
    from fa512.backends import triton_fwd

    sets, _, _ = speed_setup(name, changes, max_sets=1)
    plan, args, out = sets[0]
    triton_fwd.launch(plan, args, out)
    torch.cuda.synchronize()
    return dict(name=name, changes=changes, splits=plan.num_splits, config=str(plan.config))


def load_alt_module(path):
    """Another copy of fa512/triton_fwd.py (e.g. the previous version) for an A/B in one run."""
    import importlib.util

    import fa512

    spec = importlib.util.spec_from_file_location("fa512._triton_fwd_alt", path)
    module = importlib.util.module_from_spec(spec)
    module.__package__ = fa512.__name__  # its relative imports resolve inside fa512
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def time_speed(name, changes=None, reps=30, graph=True, module=None):
    from fa512.backends import triton_fwd

    triton_fwd = module or triton_fwd

    sets, kv_bytes, flops = speed_setup(name, changes)
    for plan, args, out in sets:  # compile + warm
        triton_fwd.launch(plan, args, out)
    torch.cuda.synchronize()
    # Eager: back-to-back launches (as a serving loop issues them), mean per call from CUDA
    # events around each batch of len(sets) calls, median over batches.
    times = []
    for _ in range(max(3, reps // len(sets))):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for plan, args, out in sets:
            triton_fwd.launch(plan, args, out)
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) * 1e-3 / len(sets))
    res = dict(name=name, changes=changes or {}, splits=sets[0][0].num_splits, config=str(sets[0][0].config),
               eager_s=statistics.median(times), kv_bytes=kv_bytes, flops=flops)
    if graph:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for plan, args, out in sets:
                triton_fwd.launch(plan, args, out)
        g.replay()
        torch.cuda.synchronize()
        gt = []
        for _ in range(max(3, reps // len(sets))):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            g.replay()
            e1.record()
            e1.synchronize()
            gt.append(e0.elapsed_time(e1) * 1e-3 / len(sets))
        res["graph_s"] = statistics.median(gt)
    return res


# ---------------------------------------------------------------------------------------------
# Ceilings
# ---------------------------------------------------------------------------------------------


def event_median(fn, reps, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        ts.append(e0.elapsed_time(e1) * 1e-3)
    return statistics.median(ts)


def ceilings():
    """bf16 GEMM 8192^3 (torch.matmul) and device-to-device copy of 2 GiB (bytes read + written)."""
    n = 8192
    mats = [torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    t_mm = event_median(lambda: torch.matmul(mats[0], mats[1]), reps=20)
    bufs = [torch.randn(1 << 29, device="cuda"), torch.empty(1 << 29, device="cuda")]  # 2 GiB each
    t_cp = event_median(lambda: bufs[1].copy_(bufs[0]), reps=30)
    bw = 2 * bufs[0].numel() * 4 / t_cp
    mats.clear()
    bufs.clear()
    torch.cuda.empty_cache()
    return dict(gemm_tflops=2 * n ** 3 / t_mm / 1e12, copy_gbs=bw / 1e9)


# ---------------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------------


def _worker(task):
    kind, payload = task
    try:
        if kind == "correct":
            return ("correct", run_correctness(payload))
        return ("warm", warm_speed(*payload))
    except Exception as exc:  # reported, never hidden
        return (kind, dict(payload if isinstance(payload, dict) else {"task": repr(payload)}, ok=False,
                           error=f"{type(exc).__name__}: {exc}", tb=traceback.format_exc()[-2000:]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sweep", action="store_true", help="also time alternative tile configs")
    ap.add_argument("--workers", type=int, default=min(12, (os.cpu_count() or 2)))
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--skip-correctness", action="store_true")
    ap.add_argument("--compare-module", help="path of another triton_fwd.py to time the speed cases with "
                    "(A/B, interleaved); only the A/B is timed then")
    ap.add_argument("--cases", help="comma-separated subset of the speed cases")
    opts = ap.parse_args()
    os.makedirs(opts.out, exist_ok=True)
    log = open(os.path.join(opts.out, "triton_acceptance.log"), "w")

    def say(msg):
        print(msg, flush=True)
        log.write(msg + "\n")
        log.flush()

    import triton

    props = torch.cuda.get_device_properties(0)
    say(f"date {time.strftime('%Y-%m-%d %H:%M:%S')} device {props.name} sms {props.multi_processor_count} "
        f"torch {torch.__version__} triton {triton.__version__}")

    if opts.cases:
        for name in [n for n in SPEED if n not in opts.cases.split(",")]:
            del SPEED[name]
            SWEEP.pop(name, None)
    tasks = [] if opts.skip_correctness else [("correct", c) for c in correctness_cases()]
    speed_variants = [(name, {}) for name in SPEED]
    if opts.sweep:
        speed_variants += [(name, ch) for name, chs in SWEEP.items() for ch in chs]
    tasks += [("warm", v) for v in speed_variants]

    t0 = time.time()
    import multiprocessing as mp

    results = {"correct": [], "warm": []}
    with mp.get_context("spawn").Pool(opts.workers) as pool:
        for kind, res in pool.imap_unordered(_worker, tasks):
            results[kind].append(res)
            if kind == "correct":
                status = "ok " if res.get("ok") else "BAD"
                say(f"[{time.time() - t0:6.1f}s] {status} {res.get('hq')}/{res.get('hkv')} {res.get('mode'):15s} "
                    f"q={res.get('q')} kv={res.get('kv')} scale={res.get('scale', 'd^-.5')} "
                    f"relL2={res.get('rel_l2', float('nan')):.2e} lse={res.get('lse_err', float('nan')):.1e} "
                    f"splits={res.get('splits')} {res.get('error', '')}")
                if "tb" in res:
                    say(res["tb"])
            elif "error" in res:
                say(f"warm-up failed: {res}")
    say(f"compile + correctness phase: {time.time() - t0:.1f}s")

    ceil = ceilings()
    say(f"ceilings: bf16 GEMM {ceil['gemm_tflops']:.0f} TFLOP/s, D2D copy {ceil['copy_gbs']:.0f} GB/s (read+write)")

    speed = []
    if opts.compare_module:
        alt = load_alt_module(opts.compare_module)
        for rnd in range(2):  # interleaved A, B, A, B so drift hits both
            for name in SPEED:
                for label, mod in (("current", None), ("compare", alt)):
                    r = time_speed(name, module=mod)
                    say(f"A/B round {rnd} {name:26s} {label:8s} splits={r['splits']} graph {r['graph_s'] * 1e3:.3f} ms "
                        f"eager {r['eager_s'] * 1e3:.3f} ms")
        speed_variants = []
    for name, changes in speed_variants:
        try:
            r = time_speed(name, changes)
        except Exception as exc:
            say(f"speed {name} {changes} FAILED {type(exc).__name__}: {str(exc)[:300]}")
            continue
        for key in ("eager_s", "graph_s"):
            if key in r:
                t = r[key]
                tag = key[:-2]
                if r["flops"] and name.startswith("prefill"):
                    r[tag + "_tflops"] = r["flops"] / t / 1e12
                    r[tag + "_frac"] = r[tag + "_tflops"] / ceil["gemm_tflops"]
                else:
                    r[tag + "_gbs"] = r["kv_bytes"] / t / 1e9
                    r[tag + "_frac"] = r[tag + "_gbs"] / ceil["copy_gbs"]
        speed.append(r)
        say(f"speed {name} {changes} splits={r['splits']} eager {r['eager_s'] * 1e3:.3f} ms "
            f"graph {r.get('graph_s', float('nan')) * 1e3:.3f} ms frac eager {r['eager_frac']:.2f} "
            f"graph {r.get('graph_frac', float('nan')):.2f} {r['config']}")

    for name, changes in (("decode_b4_32k_fp8", {"splits": 16}), ("decode_b64_8k_fp8", {})) if speed_variants else ():
        try:
            br = kernel_breakdown(name, changes)
            say(f"profile {name} {changes}: " + ", ".join(f"{k} x{c}: {t:.1f} us" for k, (c, t) in br.items()))
        except Exception as exc:
            say(f"profile {name} failed: {type(exc).__name__}: {exc}")

    json.dump(dict(ceilings=ceil, correctness=results["correct"], speed=speed),
              open(os.path.join(opts.out, "triton_acceptance.json"), "w"), indent=1, default=str)

    # ---- table -------------------------------------------------------------------------------
    corr = results["correct"]
    bad = [c for c in corr if not c.get("ok")]
    say("\n=== Triton d512 acceptance ===")
    say(f"ceilings: GEMM {ceil['gemm_tflops']:.0f} TFLOP/s | copy {ceil['copy_gbs']:.0f} GB/s")
    if corr:
        for pv in ("bf16", "fp16"):
            sel = [c for c in corr if c.get("pv") == pv and "rel_l2" in c]
            if sel:
                say(f"correctness PV={pv}: {len(sel)} cases, max relL2 {max(c['rel_l2'] for c in sel):.2e} "
                    f"(bar {OUT_TOL[pv]:.0e}), max lse err {max(c['lse_err'] for c in sel):.1e} (bar 1e-3)")
        say(f"correctness: {len(corr) - len(bad)}/{len(corr)} pass" + (f"; FAILED: {[(c.get('hq'), c.get('mode'), c.get('q'), c.get('kv')) for c in bad]}" if bad else ""))
    say(f"{'case':26s} {'config change':44s} {'spl':>3s} {'eager ms':>9s} {'graph ms':>9s} {'rate':>12s} {'frac':>5s}")
    for r in speed:
        rate = (f"{r['graph_tflops']:.0f} TFLOP/s" if "graph_tflops" in r else f"{r['graph_gbs']:.0f} GB/s") \
            if "graph_s" in r else ""
        say(f"{r['name']:26s} {json.dumps(r['changes']):44s} {r['splits']:3d} {r['eager_s'] * 1e3:9.3f} "
            f"{r.get('graph_s', float('nan')) * 1e3:9.3f} {rate:>12s} {r.get('graph_frac', r['eager_frac']):5.2f}")
    log.close()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
