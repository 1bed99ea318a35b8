"""CPU tests of the user tooling: input families, `ab --quick` and its JSON, bench's refusal and
work model, and profiles/nsys_run.py's argument handling and profiler decision."""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import subprocess
import sys

import pytest
import torch

from fa512.tools.inputs import (
    GEMMA4_HEADS,
    make_bench_case,
    make_case,
    needle_weights,
    resolve_heads,
    seq_lengths,
)
from fa512.numerics.reference import _visible, attention_ref
from fa512.tools import ab, bench
from fa512.call import Call
from fa512.planning.validate import check
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NSYS_RUN = os.path.join(ROOT, "profiles", "nsys_run.py")
cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only behaviour")


def parse(module, argv):
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    return parser.parse_args(argv)


def load_nsys_run():
    if "nsys_run" not in sys.modules:
        spec = importlib.util.spec_from_file_location("nsys_run", NSYS_RUN)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["nsys_run"] = mod  # dataclasses look their module up while the class is built
        spec.loader.exec_module(mod)
    return sys.modules["nsys_run"]


# -- inputs ----------------------------------------------------------------------------------


def test_heads_and_lengths():
    assert resolve_heads("31B") == (32, 4) and resolve_heads("26B-A4B") == (16, 2) and resolve_heads("E2B") == (8, 1)
    assert resolve_heads("12/3") == (12, 3)
    with pytest.raises(ValueError, match="heads"):
        resolve_heads("7B")
    assert seq_lengths("decode", 3, 100) == ([1, 1, 1], [100] * 3)
    assert seq_lengths("prefill", 2, 100) == ([100, 100], [100, 100])
    assert seq_lengths("chunked", 2, 100, 16) == ([16, 16], [100, 100])
    assert seq_lengths("mixed", 3, 100, 16) == ([16, 1, 1], [100] * 3)
    q, k = seq_lengths("decode", 8, 100, vary=True, generator=torch.Generator().manual_seed(0))
    assert k[0] == 100 and all(50 <= x <= 100 for x in k)


@pytest.mark.parametrize("family", ["gaussian", "gemma", "retrieval", "sink"])
@pytest.mark.parametrize("heads", list(GEMMA4_HEADS))
def test_make_case_is_a_valid_seeded_problem(family, heads):
    kw = dict(heads=heads, mode="chunked", batch=2, seqlen_k=200, q_len=8, page_size=16)
    case = make_case(family, seed=3, **kw)
    check(Call(case.q, case.k, case.v, None, case.meta.get("page_table"), case.meta.get("cu_seqlens_k"),
             case.meta["cu_seqlens_q"], case.meta["max_seqlen_q"], case.meta["seqused_k"], case.meta["max_seqlen_k"],
             case.meta["softmax_scale"], case.meta["causal"], -1, -1, None, case.meta["k_descale"],
             case.meta["v_descale"], 0, "reference"))
    hq, hkv = GEMMA4_HEADS[heads]
    assert case.q.shape == (16, hq, 512) and case.k.dtype == torch.float8_e4m3fn
    assert case.meta["k_descale"].shape == (2, hkv) and case.meta["page_table"].shape == (2, 13)
    assert sorted(case.meta["page_table"].flatten().tolist()) == sorted(set(case.meta["page_table"].flatten().tolist()))
    again = make_case(family, seed=3, **kw)
    other = make_case(family, seed=4, **kw)
    assert torch.equal(case.q, again.q) and torch.equal(case.k.float(), again.k.float())
    assert not torch.equal(case.q, other.q)
    assert case.meta["softmax_scale"] == pytest.approx(1.0 if family == "gemma" else 512**-0.5)


def _logits(case, b=0, row=0, head=0):
    """float64 logits of one query row over its sequence's keys (packed layout)."""
    kw = case.kwargs()
    hkv = case.k.shape[-2]
    g = case.q.shape[1] // hkv
    k0, k1 = int(kw["cu_seqlens_k"][b]), int(kw["cu_seqlens_k"][b + 1])
    k = case.k[k0:k1, head // g].double() * float(kw["k_descale"][b, head // g])
    return kw["softmax_scale"] * (k @ case.q[row, head].double())


def test_family_statistics():
    shape = dict(heads="E2B", mode="decode", batch=1, seqlen_k=4096, paged=False)
    for family, std in (("gaussian", 3.0), ("gemma", 4.0)):
        logits = _logits(make_case(family, logit_std=std, seed=1, **shape))
        assert 0.7 * std < float(logits.std()) < 1.3 * std
    sink = make_case("sink", seed=1, **shape)
    p = torch.softmax(_logits(sink), 0)
    assert 0.6 < float(p[:4].sum()) < 0.95  # four sinks take most of the weight


def test_retrieval_needle_is_deep_visible_and_found_by_the_reference():
    case = make_case("retrieval", heads="31B", mode="decode", batch=2, seqlen_k=2048, seed=2)
    assert len(case.needles) == 2 * 4
    for nd in case.needles:
        assert 0.1 * 2048 <= nd.key <= 0.3 * 2048 and nd.q_head % 8 == 0
    out, _ = attention_ref(case.q, case.k, case.v, **case.kwargs())
    weights = needle_weights(case, out)
    assert all(0.45 < w < 0.75 for w in weights), weights  # target 0.6, plus 1/sqrt(512) noise


def test_bench_case_runs_through_the_reference():
    case = make_bench_case(heads="E2B", q_lens=[3, 1], k_lens=[70, 130], page_size=64, device="cpu")
    out, lse = attention_ref(case.q, case.k, case.v, **case.kwargs())
    assert torch.isfinite(out).all() and torch.isfinite(lse).all()
    assert case.meta["page_table"].shape == (2, 3)


# -- ab ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ab_quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("ab")
    args = parse(ab, ["--quick", "--out", str(out), "--device", "cpu"])
    rc = ab.main(args)
    with open(out / "ab.json") as fh:
        report = json.load(fh)
    return rc, report, out


def test_ab_quick_runs_on_cpu_and_writes_json(ab_quick, capsys):
    rc, report, out = ab_quick
    assert rc == 0
    assert set(report) >= {"tool", "meta", "kernels", "cases", "rows", "ratios", "plots"}
    assert report["meta"]["gpu"] is False and report["meta"]["quick"] is True
    assert "no CUDA GPU" in report["meta"]["note"]
    assert report["kernels"]["ran"] == []
    assert set(report["kernels"]["unavailable"]) == {v[0] for v in ab.KERNEL_VARIANTS}
    for path in report["plots"]:
        with open(path, "rb") as fh:
            assert fh.read(8) == b"\x89PNG\r\n\x1a\n"
    assert {os.path.basename(p) for p in report["plots"]} == {"ab_context.png", "ab_logit_scale.png", "ab_ratio.png"}
    sweeps = {r["sweep"] for r in report["cases"]}
    assert sweeps == {"scale", "context", "coverage", "mask"}
    assert {r["family"] for r in report["cases"]} == {"gaussian", "gemma", "retrieval", "sink"}
    assert report["meta"]["time_s"] > 0  # reported, never asserted on: speed belongs in `bench`


def test_ab_quick_rows_have_every_entry_and_finite_metrics(ab_quick):
    _, report, _ = ab_quick
    rows = report["rows"]
    by_case = {}
    for r in rows:
        by_case.setdefault((r["sweep"], r["case"]), set()).add(r["entry"])
    assert len(by_case) == len(report["cases"])
    for (sweep, _), entries in by_case.items():
        assert entries >= {"reference", "cast:bf16", *ab.EMU_ENTRIES}
        assert (ab.EXACT_Q_ENTRY in entries) == (sweep == "scale")
        assert ab.ANCHOR_HW_ENTRY not in entries or sweep == "scale"
    # the anchor design on H200 accumulation: in the first scale case of a quick CPU run only
    with_hw = [case for (sweep, case), entries in by_case.items() if ab.ANCHOR_HW_ENTRY in entries]
    assert with_hw == [rows[0]["case"]] and rows[0]["sweep"] == "scale"
    assert [c["hw_emulation"] for c in report["cases"] if c["sweep"] == "scale"].count(True) == 1
    for r in rows:
        for key in ("rel_l2", "max_abs", "lse_err", "cos_min"):
            assert isinstance(r[key], float) and math.isfinite(r[key]), (r["entry"], key, r[key])
        assert r["nonfinite"] == 0 and r["lse_inf_mismatch"] == 0
        if r["kind"] == "emulation":
            assert math.isfinite(r["rel_l2_f32"]) and math.isfinite(r["ratio_to_dequant"])
    for r in rows:
        if "needle_found" in r:
            assert r["needle_found"] is True
    assert report["ratios"] and all(math.isfinite(x["ratio_to_dequant"]) for x in report["ratios"])


def test_ab_mask_sweep_pairs_causal_and_non_causal_on_the_same_inputs(ab_quick):
    _, report, _ = ab_quick
    pairs = {}
    for c in report["cases"]:
        if c["sweep"] == "mask":
            pairs.setdefault((c["family"], c["logit_std"], c["heads"], c["mode"], c["seed"]), []).append(c["causal"])
    assert pairs and all(sorted(v) == [False, True] for v in pairs.values())
    masks = report["masks"]
    assert {m["entry"] for m in masks} >= {"cast:bf16", *ab.EMU_ENTRIES}
    for m in masks:
        assert m["ratio"] == m["non_causal"] / m["causal"] and 0.5 < m["ratio"] < 2.0


def test_ab_quick_numbers_are_sane(ab_quick):
    _, report, _ = ab_quick
    rows = report["rows"]
    get = {(r["case"], r["entry"]): r for r in rows}
    for r in rows:
        if r["entry"] == "reference":
            assert r["rel_l2"] == 0.0
        if r["entry"] == "emu:dequant":
            assert r["rel_l2_f32"] < 1e-3
        if r["entry"] == "emu:fa512_fp8":
            two = get[(r["case"], "emu:fa512_fp8+2q")]
            assert two["rel_l2_f32"] < r["rel_l2_f32"]
            assert 1e-3 < r["rel_l2_f32"] < 0.2
            # the accurate mode (issue 24): as delivered within 2x the dequant control, every case
            accurate, control = get[(r["case"], ab.ACCURATE_ENTRY)], get[(r["case"], "emu:dequant")]
            assert accurate["rel_l2"] <= 2 * control["rel_l2"], (r["case"], accurate["rel_l2"], control["rel_l2"])
            assert accurate["rel_l2_f32"] < 0.1 * r["rel_l2_f32"]


def test_ab_rejects_bad_arguments(tmp_path, capsys):
    assert ab.main(parse(ab, ["--families", "nope", "--out", str(tmp_path)])) == 2
    assert ab.main(parse(ab, ["--kernels", "fastest", "--out", str(tmp_path)])) == 2
    assert "--families" in capsys.readouterr().err
    assert ab.main(parse(ab, ["--sweeps", "scale,speed", "--out", str(tmp_path)])) == 2
    assert "--sweeps" in capsys.readouterr().err


def test_ab_sweeps_option_keeps_only_those_cases(tmp_path):
    out = tmp_path / "ab"
    args = ["--quick", "--sweeps", "scale", "--families", "sink", "--no-plots", "--device", "cpu", "--out", str(out)]
    assert ab.main(parse(ab, args)) == 0
    report = json.loads((out / "ab.json").read_text())
    assert report["cases"] and {(c["sweep"], c["family"]) for c in report["cases"]} == {("scale", "sink")}


def test_ab_specs_cover_the_issue():
    quick = ab.build_specs(True, False, ("gaussian", "gemma", "retrieval", "sink"))
    assert len(quick) <= 16
    full_gpu = ab.build_specs(False, True, ("gaussian", "gemma", "retrieval", "sink"))
    assert {s.heads for s in full_gpu} == set(GEMMA4_HEADS)
    assert {s.mode for s in full_gpu} >= {"prefill", "decode", "chunked"}
    assert max(s.seqlen_k for s in full_gpu if s.family == "retrieval") == 131072
    assert {s.seqlen_k for s in full_gpu if s.sweep == "context"} >= {2048, 131072}
    masks = {(s.causal, s.window_left >= 0) for s in full_gpu}
    assert masks >= {(True, False), (True, True), (False, False)}
    # fresh inputs per case, except that the mask sweep runs each input with and without the mask
    others = [s for s in full_gpu if s.sweep != "mask"]
    pairs = [s for s in full_gpu if s.sweep == "mask"]
    assert len({s.seed for s in others}) == len(others)
    assert len({s.seed for s in pairs}) == len(pairs) // 2 and not {s.seed for s in pairs} & {s.seed for s in others}


def test_error_metrics():
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(5, 2, 512, generator=g, dtype=torch.float64)
    ref[4] = 0
    lse = torch.randn(2, 5, generator=g, dtype=torch.float64)
    lse[:, 4] = -math.inf
    m = ab.error_metrics(ref.clone(), lse.clone(), ref, lse, 5)
    assert m["rel_l2"] == 0 and m["lse_err"] == 0 and m["cos_min"] == pytest.approx(1.0)
    noisy = ref + 1e-3 * torch.randn(ref.shape, generator=g, dtype=torch.float64)
    m = ab.error_metrics(noisy, lse, ref, lse, 4)
    assert 5e-4 < m["rel_l2"] < 2e-3 and m["cos_min"] < 1
    bad_lse = lse.clone()
    bad_lse[0, 4] = 0.0
    assert ab.error_metrics(ref, bad_lse, ref, lse, 5)["lse_inf_mismatch"] == 1


def test_json_safe_replaces_non_finite():
    assert ab.json_safe({"a": [1.0, math.inf, (math.nan,)]}) == {"a": [1.0, None, [None]]}


# -- bench -------------------------------------------------------------------------------------


@cpu_only
def test_bench_refuses_on_cpu(tmp_path, capsys):
    rc = bench.main(parse(bench, ["--out", str(tmp_path)]))
    err = capsys.readouterr().err
    assert rc == 2 and "CUDA GPU" in err and "Nothing was measured" in err
    assert not os.listdir(tmp_path)


def test_bench_list_shows_the_grid(capsys):
    assert bench.main(parse(bench, ["--list"])) == 0
    text = capsys.readouterr().out
    assert "decode B=128 k=128k" in text and "prefill 32k local" in text and "chunked B=4 k=8k q=512" in text
    assert bench.main(parse(bench, ["--list", "--kernels", "nope"])) == 2


def test_bench_grid_matches_the_issue():
    grid = bench.bench_grid()
    decode = {(p.batch, p.seqlen_k) for p in grid if p.mode == "decode"}
    assert decode == {(b, k) for b in (1, 4, 16, 64, 128) for k in (2048, 8192, 32768, 131072)}
    prefill = {(p.seqlen_k, p.window_left >= 0) for p in grid if p.mode == "prefill" and p.batch == 1}
    assert prefill == {(n, local) for n in (2048, 8192, 16384, 32768) for local in (False, True)}
    assert {(p.batch, p.seqlen_k) for p in grid if p.mode == "prefill" and p.batch > 1} == {(8, 1024)}
    assert any(p.mode == "chunked" for p in grid)
    assert 0 < len(bench.bench_grid(quick=True)) < len(grid)


@pytest.mark.parametrize("q_len,k_len,causal,wl,wr", [
    (7, 7, True, -1, -1), (3, 10, True, -1, -1), (10, 4, True, -1, -1), (5, 9, False, -1, -1),
    (9, 9, True, 2, -1), (4, 12, False, 3, 1), (6, 6, False, -1, 2), (1, 50, True, 7, -1),
])
def test_visible_pairs_and_keys_read_match_the_mask(q_len, k_len, causal, wl, wr):
    problem = argparse.Namespace(window_left=wl, window_right=0 if causal else wr)
    mask = _visible(problem, torch.arange(q_len), torch.arange(k_len), q_len, k_len)
    assert bench.visible_pairs(q_len, k_len, causal, wl, wr) == int(mask.sum())
    assert bench.keys_read(q_len, k_len, causal, wl, wr) == int(mask.any(0).sum())


def test_bench_work_model():
    w = bench.work(bench.Point("decode", 64, 1, 8192), 32, 4, 1)
    kv = 2 * 64 * 8192 * 4 * 512 * 1
    qo = 2 * 64 * 32 * 512 * 2
    assert w["bytes"] == kv + qo and w["flops"] == 4 * 512 * 32 * 64 * 8192
    p = bench.work(bench.Point("prefill", 1, 8192, 8192), 32, 4, 1)
    assert p["flops"] == 4 * 512 * 32 * (8192 * 8193 // 2)
    r = bench.roofline(1e12, 1e10, 1e-3, 1e15, 4e12)
    assert r["bound"] == "memory" and r["tflops"] == pytest.approx(1000.0)
    assert r["frac_roofline"] == pytest.approx(1e15 / (100 * 4e12)) and r["gbs"] == pytest.approx(1e4)
    assert bench.rotation_sets(10 << 20, 50 << 20, 80 << 30) == 20
    assert bench.rotation_sets(1 << 30, 50 << 20, 80 << 30) == 1
    assert bench.rotation_sets(1 << 20, 50 << 20, 3 << 20) == 2  # memory-limited
    assert bench.input_set_bytes(bench.Point("decode", 128, 1, 131072), 32, 4, 1) > 68e9


def test_bench_report_formatting(tmp_path):
    # The GPU run's table and plot, fed made-up measurements, so formatting cannot fail there.
    ceilings = {
        "bf16_gemm": {"ms": 1.4, "tflops": 780.0}, "fp8_gemm": {"ms": 0.8, "tflops": 1400.0},
        "fp8_gemm_precise": {"error": "not supported"}, "copy": {"ms": 0.9, "gbs": 4400.0},
    }
    rows = []
    for point in bench.bench_grid(quick=True)[:3]:
        w = bench.work(point, 32, 4, 1)
        row = {"point": point.name, "variant": "fp8_mma", "status": "ok", "eager_ms": 2.0, "graph_ms": 1.5,
               "num_splits": 1, "n_sets": 2, "intensity": w["intensity"]}
        for tag in ("eager", "graph"):
            r = bench.roofline(w["flops"], w["bytes"], row[f"{tag}_ms"] * 1e-3, 1400e12, 4400e9)
            row.update({f"{tag}_{k}": v for k, v in r.items()})
        rows.append(row)
    rows.append({"point": "decode B=128 k=128k", "variant": "mma16[bf16kv]", "status": "skipped: needs 129.0 GiB, 120.0 GiB free"})
    text = bench.format_table(rows, ceilings, "header")
    assert "prefill 8k causal" in text and "skipped: needs" in text and "fp8_gemm_precise   failed" in text
    path = bench.make_plot(rows, ceilings, str(tmp_path / "roof.png"))
    with open(path, "rb") as fh:
        assert fh.read(4) == b"\x89PNG"


# -- profiles/nsys_run.py ----------------------------------------------------------------------


def test_nsys_run_decision():
    mod = load_nsys_run()
    parser = mod.build_parser()
    none = lambda exe: None  # noqa: E731
    both = lambda exe: f"/opt/nvidia/bin/{exe}"  # noqa: E731

    args = parser.parse_args(["--case", "prefill"])
    d = mod.decide_profiler(args, ["--case", "prefill"], which=none)
    assert d.mode == "torch" and "nsys not found" in d.reason and d.command is None

    d = mod.decide_profiler(args, ["--case", "prefill"], which=both)
    assert d.mode == "nsys" and d.command[:2] == ["/opt/nvidia/bin/nsys", "profile"]
    assert d.command[-1] == "--inner" and "--case" in d.command and NSYS_RUN in d.command
    assert any(a.startswith("--output=") and "fa512_prefill_auto_fp8_B1_k8192" in a for a in d.command)

    args = parser.parse_args(["--ncu", "--ncu-call", "3", "--ncu-kernel", "fwd"])
    d = mod.decide_profiler(args, ["--ncu", "--ncu-call", "3"], which=both)
    assert d.mode == "ncu" and d.command[0] == "/opt/nvidia/bin/ncu"
    joined = " ".join(d.command)
    assert "--clock-control none" in joined and f"--nvtx-include {mod.NCU_TARGET_RANGE}/" in joined
    assert "--launch-count 1" in joined and "--kernel-name regex:fwd" in joined and d.command[-1] == "--inner"
    assert mod.decide_profiler(args, [], which=none).mode == "error"

    assert mod.decide_profiler(parser.parse_args(["--profiler", "torch"]), [], which=both).mode == "torch"
    assert mod.decide_profiler(parser.parse_args(["--profiler", "nsys"]), [], which=none).mode == "error"
    assert mod.decide_profiler(parser.parse_args(["--inner"]), [], which=both).mode == "inner"


def test_nsys_run_shapes_and_bad_arguments():
    mod = load_nsys_run()
    parser = mod.build_parser()
    s = mod.resolve_shape(parser.parse_args(["--case", "mixed", "--batch", "4", "--seqlen-k", "1000", "--q-len", "64"]))
    assert s["q_lens"] == [64, 1, 1, 1] and s["k_lens"] == [1000] * 4 and s["causal"]
    s = mod.resolve_shape(parser.parse_args(["--case", "prefill", "--seqlen-k", "300", "--mask", "local", "--window", "31"]))
    assert s["q_lens"] == [300] and s["window_left"] == 31
    with pytest.raises(SystemExit):
        parser.parse_args(["--case", "training"])
    assert mod.main(["--batch", "0", "--dry-run"]) == 2


def test_nsys_run_dry_run_cli():
    proc = subprocess.run([sys.executable, NSYS_RUN, "--case", "mixed", "--dry-run", "--profiler", "torch"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["decision"]["mode"] == "torch" and info["shape"]["q_lens"] == "512, 1 x15"


def test_nsys_run_torch_fallback_profiles_on_cpu(tmp_path, capsys):
    mod = load_nsys_run()
    argv = ["--case", "decode", "--heads", "E2B", "--batch", "2", "--seqlen-k", "128", "--iters", "2",
            "--warmup", "1", "--device", "cpu", "--profiler", "torch", "--out", str(tmp_path)]
    assert mod.main(argv) == 0
    name = "fa512_decode_auto_fp8_B2_k128"
    with open(tmp_path / f"{name}_trace.json") as fh:
        trace = json.load(fh)
    names = {e.get("name") for e in trace["traceEvents"]}
    assert {"setup", "warmup", "steady", "fa512.attention[reference] #1"} <= names
    summary = json.loads((tmp_path / f"{name}_summary.json").read_text())
    assert summary["kernel"] == "reference" and summary["decision"]["mode"] == "torch"
    assert (tmp_path / f"{name}_kernels.txt").read_text().strip()


def test_ab_kernel_path_runs_with_the_reference_as_a_stand_in(monkeypatch, tmp_path):
    # The GPU branch of run_case (plan, op call, last_launch, vs_emu, ratios, errors) driven on
    # CPU through the "reference" kernel, which the op can run anywhere.
    import fa512

    spec = ab.CaseSpec("scale", "retrieval", heads="E2B", mode="decode", batch=1, seqlen_k=512, logit_std=2.0, seed=1)
    variants = [
        ("ref[fp8kv]", "reference", "fp8", "emu:dequant"),
        ("ref[bf16kv]", "reference", "bf16", "emu:mma16[bf16kv]"),
        ("triton[fp8kv]", "triton", "fp8", None),
    ]
    unavailable = {}
    rows = ab.run_case(spec, torch.device("cpu"), variants, unavailable)
    got = {r["entry"]: r for r in rows}
    for label in ("ref[fp8kv]", "ref[bf16kv]"):
        r = got[label]
        assert r["kind"] == "kernel" and r["ran"] == "reference" and r["rel_l2"] < 5e-3
        assert r["vs_emu"] < 5e-3 and r["needle_found"] is True and "ratio_to_dequant" in r
    assert "triton[fp8kv]" in unavailable and "triton[fp8kv]" not in got
    assert [os.path.basename(p) for p in ab.make_plots(rows, str(tmp_path))] == ["ab_ratio.png"]

    real = fa512.attention

    def broken(*a, **kw):
        if kw.get("kernel") == "reference":
            raise RuntimeError("illegal memory access")
        return real(*a, **kw)

    monkeypatch.setattr(fa512, "attention", broken)
    rows = ab.run_case(spec, torch.device("cpu"), variants[:1], {})
    err = [r for r in rows if r["kind"] == "error"]
    assert len(err) == 1 and "illegal memory access" in err[0]["error"]
    assert "ERROR RuntimeError" in ab.format_table(rows, "h")


@pytest.mark.gpu
def test_ab_quick_on_gpu_runs_every_available_kernel(tmp_path):
    rc = ab.main(parse(ab, ["--quick", "--out", str(tmp_path), "--device", "cuda", "--families", "gaussian,retrieval"]))
    report = json.loads((tmp_path / "ab.json").read_text())
    assert rc == 0 and report["meta"]["gpu"] is True and report["kernels"]["failed"] == []
    kernel_of = {v[0]: v[1] for v in ab.KERNEL_VARIANTS}
    floor = {r["case"]: r["rel_l2"] for r in report["rows"] if r["entry"].startswith("cast:")}
    for r in report["rows"]:
        if r["kind"] == "kernel":
            assert r["ran"] == kernel_of[r["entry"]]  # the op really ran the requested kernel
            # fp8_mma: issue 5's bar, within 5e-4 of the exact numerics of the variant that ran
            # (`vs_hw`: its emulation with the H200's FP8 accumulation). Its `vs_emu` is the
            # distance to the fa512_fp8 design with exact accumulation, 2.9e-2 on "gaussian std=1
            # E2B chunked B=1 q=64 k=2048" (CPU emulation and H200 alike, 2026-12-01).
            if r["entry"] == "fp8_mma":
                assert r["vs_hw"] <= 5e-4, (r["entry"], r["case"], r["vs_hw"])
            # mma16: its emulation (design "dequant": the same 16-bit operands, exact fp32
            # accumulation) is not bit-exact, and both outputs are rounded to q's 16-bit dtype,
            # so they can differ by up to two roundings: at most twice the cast floor of the case
            # (H200 2026-12-01: up to 1.6x, 2.7e-3 for bf16 KV against a 1.66e-3 floor).
            elif r["entry"] in ("mma16[fp8kv]", "mma16[bf16kv]"):
                assert r["vs_emu"] <= 2 * floor[r["case"]], (r["entry"], r["case"], r["vs_emu"], floor[r["case"]])
            if "needle_found" in r:
                assert r["needle_found"], (r["entry"], r["case"])


@pytest.mark.gpu
def test_bench_quick_on_gpu(tmp_path):
    rc = bench.main(parse(bench, ["--quick", "--modes", "decode", "--no-first-call", "--out", str(tmp_path)]))
    report = json.loads((tmp_path / "bench.json").read_text())
    assert rc == 0
    assert report["ceilings"]["bf16_gemm"]["tflops"] > 50 and report["ceilings"]["copy"]["gbs"] > 500
    for r in report["rows"]:
        assert r["status"] == "ok" or r["status"].startswith(("not available", "skipped")), r
        if r["status"] == "ok":
            assert r["eager_ms"] > 0 and 0 < r["eager_frac_bandwidth"] < 1.5
            # the fractions are of the ceilings timed right before and after the point
            assert len(r["copy_gbs_around"]) == 2 and r["copy_gbs"] == sum(r["copy_gbs_around"]) / 2 > 500
            assert r["ceiling_tflops"] > 50
            assert abs(r["eager_frac_bandwidth"] * r["copy_gbs"] - r["eager_gbs"]) < 1e-6 * r["eager_gbs"]
    assert os.path.exists(report["plots"][0])


@pytest.mark.gpu
def test_bench_times_the_accurate_mode_beside_the_fast_one(tmp_path):
    # decode rows of both (issue 24's "accurate decode at the fast mode's speed"); prefill rows of
    # the accurate variant are refused (no accurate prefill tile), never run fast
    rc = bench.main(parse(bench, ["--quick", "--modes", "decode,prefill", "--no-first-call", "--out", str(tmp_path),
                                  "--kernels", "fp8_mma,fp8_mma[accurate]"]))
    rows = json.loads((tmp_path / "bench.json").read_text())["rows"]
    assert rc == 0
    acc = [r for r in rows if r["variant"] == "fp8_mma[accurate]"]
    decode = [r for r in acc if r["mode"] == "decode"]
    assert decode and all(r["status"] == "ok" and r["precision"] == "accurate" for r in decode), decode
    assert all(r["status"].startswith("not available") for r in acc if r["mode"] == "prefill")
    fast = [r for r in rows if r["variant"] == "fp8_mma" and r["status"] == "ok"]
    assert fast and all(r["precision"] == "fast" for r in fast)


@pytest.mark.gpu
def test_bench_latency_on_gpu(tmp_path):
    from fa512.tools.bench_grid import VARIANTS, latency_cases

    rc = bench.main(parse(bench, ["--quick", "--modes", "latency", "--no-first-call", "--out", str(tmp_path)]))
    report = json.loads((tmp_path / "bench.json").read_text())
    assert rc == 0 and report["rows"] == []
    rows = report["latency"]
    assert {(r["case"], r["variant"]) for r in rows} == {(c.name, v) for c in latency_cases(quick=True) for v in c.variants}
    kernel_of = {v[0]: v[1] for v in VARIANTS}
    for r in rows:
        assert r["status"] == "ok" or r["status"].startswith("not available"), r
        if r["status"] != "ok":
            continue
        assert r["ran"] == r["kernel"] == kernel_of[r["variant"]]  # the op really ran the kernel named
        for key in ("us", "min_us", "copy_us", "pct_copy", "gbs"):
            assert r[key] is not None and math.isfinite(r[key]) and r[key] > 0, (key, r)
        assert r["pct_copy"] == pytest.approx(100 * r["copy_us"] / r["us"])
        assert r["num_splits"] >= 1 and r["ctas"] >= r["num_splits"]
        assert r["n_sets"] * r["bytes"] >= 2 * r["l2_bytes"] >= 120e6  # L2 cold
    assert any(r["variant"] == "fp8_mma" and r["status"] == "ok" for r in rows)
