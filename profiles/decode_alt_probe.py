"""GPU probes of the decode_alt tile (sessions 30-31; run in a tree that has the layout).

  python3 profiles/decode_alt_probe.py streams   # test_many_splits' two-stream case, taken apart
  python3 profiles/decode_alt_probe.py graph CASE  # one latency case captured and replayed
  python3 profiles/decode_alt_probe.py b8 [SPLITS] # decode B=8 x 8k 8/1 eager, against the emulation

streams: the two decode calls of `test_gpu_fused_combine_on_two_streams_at_once_matches_one_at_a_time`
(4 sequences of 0, 1, 3000, 16384 keys, 32 splits, fused combine), each run alone twice on the
default stream, alone on a fresh stream, then both at once on two streams 20 times; every result
against the emulation of the variant that ran, and which sequence differs from the first run.
graph: `bench.bench_latency` of one latency case (name substring) in this process, so that a crash
names its case (run it under `python3 -X faulthandler`).
b8: the case that faulted at three stages (session 30: a stage shared by the warpgroups, see
`consumer_decode_alt`), one eager call against the emulation (also under compute-sanitizer).
"""

from __future__ import annotations

import sys

import torch

sys.path.insert(0, "tests")


def _calls():
    import fa512
    from helpers import make_problem

    calls = []
    for seed in (1, 2):
        q, k, v, kw = make_problem([1, 1, 1, 1], [0, 1, 3000, 16384], hq=8, hkv=1, page_size=64,
                                   q_dtype=torch.bfloat16, kv_dtype=torch.float8_e4m3fn, seed=seed, device="cuda")
        calls.append((q, k, v, dict(kw, causal=True, softmax_scale=0.06, num_splits=32, kernel="fp8_mma")))
    return fa512, calls


def _diff(a, b):
    """Per sequence: (max |out diff|, max |lse diff|), None where equal."""
    (o, l), (wo, wl) = a, b
    rows = []
    for s in range(4):
        do = float((o[s].float() - wo[s].float()).abs().nan_to_num(1e30).max())
        same_l = torch.equal(l[:, s], wl[:, s])
        dl = 0.0 if same_l else float((l[:, s] - wl[:, s]).abs().nan_to_num(1e30).max())
        rows.append(None if do == 0 and same_l else (round(do, 5), round(dl, 5)))
    return rows


def _emulation(q, k, v, kw, cfg):
    """The emulation of variant ``cfg`` on the call's inputs (kw: the op's keywords)."""
    from fa512.numerics.emulation import emulate_attention, fp8_mma_design

    return emulate_attention(q, k, v, **{a: b for a, b in kw.items() if a != "kernel"}, design=fp8_mma_design(cfg))


def _vs(res, emu, rows):
    from fa512.tools.fuzz import compare

    m = compare(res[0], res[1], emu[0], emu[1], rows)
    return f"emu rel_l2 {m['rel_l2']:.2e} lse {m.get('lse_err', 0):.2e}"


def b8(splits: int = 0):
    import fa512
    from fa512.launch.run import last_launch
    from helpers import make_problem

    q, k, v, kw = make_problem([1] * 8, [8192] * 8, hq=8, hkv=1, page_size=64, q_dtype=torch.bfloat16,
                               kv_dtype=torch.float8_e4m3fn, seed=3, device="cuda")
    kw = dict(kw, causal=True, kernel="fp8_mma", **({"num_splits": splits} if splits else {}))
    res = fa512.attention(q, k, v, **kw)
    torch.cuda.synchronize()
    cfg = last_launch["config"]
    print("ran", last_launch["kernel"], last_launch["num_splits"], last_launch.get("combine"), cfg.layout,
          "stages", cfg.kv_stages, flush=True)
    kw["num_splits"] = last_launch["num_splits"]
    print(_vs(res, _emulation(q, k, v, kw, cfg), 8), flush=True)


def streams():
    fa512, calls = _calls()
    from fa512.launch.run import last_launch

    first = [fa512.attention(q, k, v, **kw) for q, k, v, kw in calls]
    torch.cuda.synchronize()
    cfg = last_launch["config"]
    print("ran", last_launch["kernel"], last_launch.get("combine"), cfg.layout, "stages", cfg.kv_stages, flush=True)
    emu = [_emulation(q, k, v, kw, cfg.with_split(True)) for q, k, v, kw in calls]

    def vs_emu(i, res):
        return _vs(res, emu[i], 4)

    for i in range(2):
        print(f"call {i} first run: {vs_emu(i, first[i])}", flush=True)
    again = [fa512.attention(q, k, v, **kw) for q, k, v, kw in calls]
    torch.cuda.synchronize()
    print("alone again, default stream:", [_diff(a, b) for a, b in zip(again, first)], flush=True)
    side = torch.cuda.Stream()
    fresh = []
    for q, k, v, kw in calls:
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fresh.append(fa512.attention(q, k, v, **kw))
        torch.cuda.synchronize()
    print("alone on a fresh stream:", [_diff(a, b) for a, b in zip(fresh, first)], flush=True)
    streams_ = [torch.cuda.Stream() for _ in calls]
    bad = 0
    for rep in range(20):
        together = [None, None]
        for i, (stream, (q, k, v, kw)) in enumerate(zip(streams_, calls)):
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                together[i] = fa512.attention(q, k, v, **kw)
        torch.cuda.synchronize()
        d = [_diff(a, b) for a, b in zip(together, first)]
        if any(x is not None for row in d for x in row):
            bad += 1
            if bad <= 4:
                print(f"together rep {rep}: {d}; {vs_emu(0, together[0])}; {vs_emu(1, together[1])}", flush=True)
    print(f"together: {bad} of 20 reps differ from the first run", flush=True)


def graph(name: str):
    from fa512.tools import bench
    from fa512.tools.bench_grid import LATENCY_CASES, VARIANTS

    case = next(c for c in LATENCY_CASES if name in c.name)
    variant = next(v for v in VARIANTS if v[0] == "fp8_mma")
    props = torch.cuda.get_device_properties(0)
    row = bench.bench_latency(case, variant, torch.device("cuda"), bench.rep_budget(True),
                              max(props.L2_cache_size, 60 * 2**20), 7)
    keep = ("case", "status", "us", "pct_copy", "num_splits", "ctas", "n_sets", "calls_per_graph")
    print({k: row.get(k) for k in keep}, flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "streams":
        streams()
    elif sys.argv[1] == "b8":
        b8(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
    else:
        graph(sys.argv[2])
