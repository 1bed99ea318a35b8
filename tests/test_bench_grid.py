"""CPU tests of `fa512.tools.bench_grid`: the latency cases of issue 22, their byte counts, the
L2 rotation that keeps them cold, the CTA count and ``python -m fa512 bench --list``. The GPU run
of the latency mode is `tests/test_tools.py::test_bench_latency_on_gpu`."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from fa512.tools import bench, bench_grid
from fa512.tools.bench_grid import LATENCY_CASES, latency_cases, latency_sets, work

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
L2_TWICE = 120e6  # the issue's bar: rotated working set >= 2 x 60 MB

# Issue 22's cases, written out again: (B, queries per sequence, keys, Hq, Hkv) -> variants.
ISSUE_CASES = {
    (1, 1, 8192, 32, 4): {"fp8_mma", "mma16[bf16kv]", "triton[fp8kv]"},
    (1, 4, 28672, 8, 1): {"fp8_mma"},
    (8, 1, 8192, 8, 1): {"fp8_mma"},
    (32, 4, 28672, 8, 1): {"fp8_mma"},
    (1, 1, 64, 32, 4): {"fp8_mma"},
}
KV_BYTES = {"fp8": 1, "bf16": 2}


def shape(case):
    p = case.point
    return (p.batch, p.q_len, p.seqlen_k, case.hq, case.hkv)


def expected_bytes(batch, q_len, keys, hq, hkv, kv_bytes):
    """K and V of every key (the last of the causal, bottom-right aligned queries sees them all)
    in the cache dtype, plus Q and O in bf16: per sequence, per head, 512 elements a row."""
    kv = 2 * keys * hkv * 512 * kv_bytes
    q_and_o = 2 * q_len * hq * 512 * 2
    return batch * (kv + q_and_o)


def variant(label):
    return next(v for v in bench_grid.VARIANTS if v[0] == label)


def parse(argv):
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    return parser.parse_args(argv)


def test_latency_cases_match_the_issue():
    assert {shape(c): set(c.variants) for c in LATENCY_CASES} == ISSUE_CASES
    assert all(c.point.mode == "latency" and c.point.causal and c.point.window_left < 0 for c in LATENCY_CASES)
    assert {shape(c) for c in latency_cases(quick=True)} == {(1, 1, 8192, 32, 4), (1, 4, 28672, 8, 1)}
    names = [c.name for c in LATENCY_CASES]
    assert len(set(names)) == len(names)
    assert "MTP q=4 B=32 k=28k 8/1" in names and "decode B=1 k=64 32/4 floor" in names
    assert "latency" in bench_grid.MODES and "latency" in parse([]).modes.split(",")


def test_profile_cases_add_named_prefill_points():
    # the in-kernel profiles take latency cases by default and grid points by name (31B heads)
    from fa512.tools.bench import profile_cases

    assert [c.name for c in profile_cases("")] == [c.name for c in LATENCY_CASES]
    # kernel_timeline's default names latency cases only
    assert [c.name for c in profile_cases("floor,B=1 k=8k")] == ["decode B=1 k=8k 32/4", "decode B=1 k=64 32/4 floor"]
    named = profile_cases("floor,prefill 2k causal,prefill 8 x 1k")
    assert [c.name for c in named] == ["decode B=1 k=64 32/4 floor", "prefill 2k causal 32/4",
                                       "prefill 8 x 1k causal 32/4"]
    assert (named[2].point.batch, named[2].point.q_len, named[2].hq, named[2].hkv) == (8, 1024, 32, 4)


@pytest.mark.parametrize("case", LATENCY_CASES, ids=lambda c: c.name)
def test_latency_bytes_match_an_independent_count(case):
    for label in case.variants:
        kv = variant(label)[2]
        assert work(case.point, case.hq, case.hkv, KV_BYTES[kv])["bytes"] == expected_bytes(*shape(case), KV_BYTES[kv])
    # visible pairs: B x (q keys for each query, less the causal triangle of the first q - 1)
    b, q, keys, hq, _ = shape(case)
    assert work(case.point, case.hq, case.hkv, 1)["flops"] == 4 * 512 * hq * b * (q * keys - q * (q - 1) // 2)


def test_latency_bytes_spelled_out():
    by_shape = {shape(c): c for c in LATENCY_CASES}
    decode = by_shape[(1, 1, 8192, 32, 4)].point
    assert work(decode, 32, 4, 1)["bytes"] == 8192 * 4 * 512 * 2 + 32 * 512 * 2 * 2 == 33_619_968
    floor = by_shape[(1, 1, 64, 32, 4)].point
    assert work(floor, 32, 4, 1)["bytes"] == 64 * 4 * 512 * 2 + 32 * 512 * 2 * 2 == 327_680


@pytest.mark.parametrize("case", LATENCY_CASES, ids=lambda c: c.name)
def test_latency_rotation_covers_two_l2_caches(case):
    for label in case.variants:
        nbytes = work(case.point, case.hq, case.hkv, KV_BYTES[variant(label)[2]])["bytes"]
        n = latency_sets(nbytes)
        assert n * nbytes >= L2_TWICE and n * nbytes >= 2 * bench_grid.LATENCY_L2_BYTES
        assert n == 1 or (n - 1) * nbytes < 2 * bench_grid.LATENCY_L2_BYTES  # the fewest that do
        assert latency_sets(nbytes, 100 << 20) * nbytes >= 200 << 20  # a larger L2 rotates more


def test_meta_plan_for_an_h200():
    import fa512

    case = next(c for c in LATENCY_CASES if shape(c) == (1, 1, 8192, 32, 4))
    try:
        plan = bench_grid.meta_plan(case, variant("fp8_mma"))
    except fa512.KernelUnavailableError as exc:
        pytest.skip(f"fp8_mma does not plan here: {exc}")
    assert plan.kernel == "fp8_mma" and plan.num_splits >= 1
    assert plan.ctas == 1 * 4 * plan.num_splits * 1  # 8 packed rows: one M tile per kv head


def _row(text, case, label):
    lines = [ln for ln in text.splitlines() if ln.startswith(case.name + " ") and f" {label} " in ln]
    assert len(lines) == 1, (case.name, label, text)
    return lines[0].split()[len(case.name.split()):]


def test_bench_list_runs_on_cpu_and_lists_every_latency_case():
    proc = subprocess.run([sys.executable, "-m", "fa512", "bench", "--list"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "decode B=128 k=128k" in text and "prefill 32k local" in text  # the grid is listed too
    for case in LATENCY_CASES:
        for label in case.variants:
            kv = variant(label)[2]
            cols = _row(text, case, label)  # variant kv bytes MFLOP sets rotated-MB ...
            nbytes = expected_bytes(*shape(case), KV_BYTES[kv])
            assert cols[:3] == [label, kv, str(nbytes)]
            assert int(cols[4]) == latency_sets(nbytes) and float(cols[5]) * 1e6 >= L2_TWICE - 1e5


def test_bench_list_modes_quick_and_the_dry_run_alias(capsys):
    assert bench.main(parse(["--list", "--quick", "--modes", "latency"])) == 0
    text = capsys.readouterr().out
    assert "2 latency cases" in text and "decode B=1 k=8k 32/4" in text and "MTP q=4 B=1 k=28k 8/1" in text
    assert "B=32" not in text and "prefill" not in text
    assert bench.main(parse(["--dry-run", "--quick", "--modes", "latency"])) == 0
    assert capsys.readouterr().out == text
    assert bench.main(parse(["--list", "--modes", "latency", "--kernels", "fp8_mma"])) == 0
    text = capsys.readouterr().out
    assert "mma16[bf16kv]" not in text and "decode B=1 k=64 32/4 floor" in text
    assert bench.main(parse(["--list", "--modes", "latency,nope"])) == 2
    assert "latency" in capsys.readouterr().err


def test_latency_table_formatting():
    ok = {"case": "decode B=1 k=8k 32/4", "variant": "fp8_mma", "status": "ok", "ran": "fp8_mma", "num_splits": 32,
          "ctas": 128, "bytes": 33619968, "n_sets": 4, "us": 12.5,
          "copy_us": 10.0, "pct_copy": 80.0}
    skipped = {"case": "decode B=1 k=8k 32/4", "variant": "triton[fp8kv]", "status": "not available: no triton"}
    text = bench.format_latency([ok, skipped])
    assert "12.50" in text and "80.0" in text and "not available: no triton" in text


def test_grid_has_the_long_context_prefill_points():
    # issue 23: prefill 16k and 32k, chunk 2k over 16k, 8k over 32k, 2k over 128k, 8 x 1k
    names = {p.name for p in bench_grid.bench_grid()}
    assert {"prefill 16k causal", "prefill 32k causal", "chunked B=1 k=16k q=2k causal",
            "chunked B=1 k=32k q=8k causal", "chunked B=1 k=128k q=2k causal", "prefill 8 x 1k causal"} <= names
    eight = next(p for p in bench_grid.bench_grid() if p.name == "prefill 8 x 1k causal")
    assert (eight.batch, eight.q_len, eight.seqlen_k) == (8, 1024, 1024)


def test_the_accurate_mode_is_an_opt_in_bench_variant(capsys):
    # issue 24 reads accurate decode's speed off `bench --kernels fp8_mma,fp8_mma[accurate]`;
    # the default run is unchanged
    labels = [v[0] for v in bench_grid.VARIANTS]
    assert "fp8_mma[accurate]" not in labels and "fp8_mma[accurate]" not in parse([]).kernels.split(",")
    assert [v[0] for v in bench_grid.OPT_IN_VARIANTS] == ["fp8_mma[accurate]"]
    assert bench_grid.variant_precision("fp8_mma[accurate]") == "accurate"
    assert {bench_grid.variant_precision(label) for label in labels} == {"auto"}
    assert bench.main(parse(["--list", "--modes", "decode", "--kernels", "fp8_mma,fp8_mma[accurate]"])) == 0
    assert "x 2 variants" in capsys.readouterr().out
    assert bench.main(parse(["--list", "--kernels", "fp8_mma[fast]"])) == 2
    assert "fp8_mma[accurate]" in capsys.readouterr().err  # the error names the opt-in too
