"""Tests of `python -m fa512 fuzz` (fa512.tools.fuzz).

CPU: the reference passes 50 cases; the fuzzer catches a kernel that corrupts a row or reads the
slots past seqused_k, and prints a repro line that reruns the case; refusals are counted, not
failed; a seed gives the same cases everywhere; a few fp16 cases through the Triton interpreter.
GPU: 500 cases of each SM90 kernel and of Triton, no failure.
"""

import argparse
import dataclasses
import importlib
import json
import os
import re
import sys

import pytest
import torch

import fa512
from fa512.tools import fuzz, fuzz_cases
from helpers import interpreted_triton_fwd


def run(argv) -> int:
    parser = argparse.ArgumentParser()
    fuzz.add_arguments(parser)
    return fuzz.main(parser.parse_args(argv))


def fail_lines(text: str) -> list:
    return [line for line in text.splitlines() if line.startswith("FAIL ")]


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory):
    path = tmp_path_factory.mktemp("fuzz") / "fuzz.json"
    rc = run(["--kernel", "reference", "--cases", "50", "--device", "cpu", "--json", str(path)])
    return rc, json.loads(path.read_text())


def test_reference_passes_50_cases(reference_run):
    rc, report = reference_run
    assert rc == 0
    summary = report["summary"]["reference"]
    assert (summary["cases"], summary["pass"], summary["fail"], summary["refused"]) == (50, 50, 0, 0)
    results = [c["results"]["reference"] for c in report["cases"]]
    assert {r["ran"] for r in results} == {"reference"}
    # rows that see no key were checked (out = 0, lse = -inf), and the splits the call asked for ran
    assert sum(r["metrics"]["empty_rows"] for r in results) > 0
    assert any(r["num_splits"] > 1 for r in results)


def test_cases_cover_the_contract(reference_run):
    _, report = reference_run
    specs = [c["spec"] for c in report["cases"]]
    assert {s["kv_dtype"] for s in specs} == {"fp8", "bf16", "fp16"} and {s["q_dtype"] for s in specs} == {"bf16", "fp16"}
    assert {s["paged"] for s in specs} == {True, False}
    assert {s["hq"] // s["hkv"] for s in specs} == {1, 2, 4, 8, 16}
    assert {s["garbage"] for s in specs} >= {"nan", "inf", "mixed", "zero"}
    assert any(0 in s["k_lens"] for s in specs) and any(0 in s["q_lens"] for s in specs)
    assert any(s["causal"] for s in specs) and any(s["window_left"] >= 0 for s in specs)
    assert any(not s["causal"] and s["window_right"] >= 0 for s in specs)
    modes = {m for s in specs for m in s["descale"].values()}
    assert {"none", "per_bh"} <= modes and len(modes) >= 5
    assert {s["kv_view"] for s in specs if s["paged"]} >= {"vllm", "nhd", "hnd"}
    regression = specs[0]
    assert regression["name"] == "mma16-nan-rows-decode"
    assert (regression["hq"], regression["hkv"], regression["page_size"], regression["k_lens"]) == (8, 1, 64, [70, 130, 1])
    assert regression["causal"] and regression["kv_dtype"] == "bf16" and regression["garbage"] == "nan"


def test_garbage_surrounds_the_owned_keys():
    spec = dataclasses.replace(fuzz_cases.make_spec(0, 0), kv_view="hnd", q_pad_rows=2)
    call, oracle, _ = fuzz_cases.call_on(fuzz_cases.build(spec), "cpu")
    k, table = call["k"].float(), call["page_table"]
    assert k.stride()[1] == 512 and k.stride()[2] == 64 * 512  # an HND cache viewed as (pages, page, Hkv, D)
    nan_slots = torch.isnan(k).all(-1).all(-1)
    for b, n in enumerate(spec.k_lens):
        for j in range(n):
            page, slot = int(table[b, j // 64]), j % 64
            assert not nan_slots[page, slot] and torch.equal(k[page, slot], oracle["k"][page, slot].float())
    assert int(nan_slots.sum()) == nan_slots.numel() - sum(spec.k_lens)  # every other slot is NaN
    assert torch.isnan(call["q"][-2:].float()).all()  # rows past cu_seqlens_q[B]


def _corrupting(real):
    def attention(*args, **kw):
        out, lse = real(*args, **kw)
        rows = int(kw["cu_seqlens_q"][-1])
        if rows:
            out[rows - 1, 0] += 1.0
        return out, lse

    return attention


def test_catches_a_corrupted_row_and_prints_the_repro(monkeypatch, capsys):
    monkeypatch.setattr(fa512, "attention", _corrupting(fa512.attention))
    assert run(["--kernel", "reference", "--cases", "6", "--device", "cpu", "--seed", "5"]) == 1
    lines = fail_lines(capsys.readouterr().out)
    with_rows = [i for i in range(6) if sum(fuzz_cases.make_spec(5, i).q_lens)]
    assert len(lines) == len(with_rows)
    first = re.match(r"FAIL (python -m fa512 fuzz --seed 5 --case (\d+) --kernel reference)  # (.*)$", lines[0])
    assert first, lines[0]
    index = int(first.group(2))
    assert first.group(3).startswith(fuzz_cases.make_spec(5, index).describe())
    # the printed command reruns that case alone, with the same verdict
    assert run(first.group(1).split()[4:] + ["--device", "cpu"]) == 1
    again = fail_lines(capsys.readouterr().out)
    assert again == [lines[0]]


def _reading_whole_pages(real):
    """A kernel that attends to every slot of a sequence's last page, past seqused_k."""

    def attention(q, k, v, **kw):
        if kw.get("page_table") is not None:
            page = k.shape[1]
            kw = dict(kw, seqused_k=(kw["seqused_k"] + page - 1) // page * page, max_seqlen_k=None)
        return real(q, k, v, **kw)

    return attention


def test_catches_a_kernel_that_reads_unused_slots(monkeypatch, capsys):
    monkeypatch.setattr(fa512, "attention", _reading_whole_pages(fa512.attention))
    assert run(["--kernel", "reference", "--case", "0,1", "--device", "cpu"]) == 1  # the NaN-garbage regression cases
    lines = fail_lines(capsys.readouterr().out)
    # NaN garbage reaches the result as NaN out or, where a row's sum is NaN, as its lse (which
    # of the two depends on how the reference's reductions order the NaN): either is caught
    assert len(lines) == 2 and all("nonfinite out" in line or "non-finite lse" in line for line in lines)
    assert "--case 0 --kernel reference  # [mma16-nan-rows-decode]" in lines[0]


def test_refusals_are_counted_not_failed(monkeypatch, capsys, tmp_path):
    path = tmp_path / "fuzz.json"
    # mma16 needs an SM90 GPU: on this machine it refuses every case
    assert run(["--kernel", "mma16,reference", "--cases", "8", "--device", "cpu", "--json", str(path)]) == 0
    summary = json.loads(path.read_text())["summary"]
    assert (summary["mma16"]["refused"], summary["mma16"]["fail"], summary["mma16"]["pass"]) == (8, 0, 0)
    assert summary["reference"]["pass"] == 8
    assert "needs an SM90 GPU" in capsys.readouterr().out

    # a kernel's documented limit (TMA alignment) is a refusal; any other ValueError a failure
    def tma_limit(*args, **kw):
        raise ValueError("fa512: q: got data_ptr % 16 = 2, expected a 16-byte aligned base address "
                         "(the mma16 kernel loads it with TMA)")

    monkeypatch.setattr(fa512, "attention", tma_limit)
    assert run(["--kernel", "reference", "--cases", "4", "--device", "cpu", "--json", str(path)]) == 0
    assert json.loads(path.read_text())["summary"]["reference"]["refused"] == 4

    def bad_value(*args, **kw):
        raise ValueError("fa512: q: got strides (1, 2, 3), expected something else")

    monkeypatch.setattr(fa512, "attention", bad_value)
    assert run(["--kernel", "reference", "--cases", "3", "--device", "cpu"]) == 1
    assert len(fail_lines(capsys.readouterr().out)) == 3


def test_prepare_only_runs_no_case(monkeypatch, capsys):
    # the compile step of several runs of the same cases, done once: it stops before the cases
    def must_not_run(**_):
        raise AssertionError("--prepare-only ran a case")

    monkeypatch.setattr(fa512, "attention", must_not_run)
    monkeypatch.setattr(fa512, "attention_ref", must_not_run)
    assert run(["--kernel", "reference", "--cases", "3", "--device", "cpu", "--prepare-only"]) == 0
    out = capsys.readouterr().out
    assert "prepared 3 cases of reference" in out and "fuzz: seed" not in out


def test_same_seed_same_cases(capsys):
    first = [dataclasses.asdict(fuzz_cases.make_spec(3, i)) for i in range(40)]
    assert first == [dataclasses.asdict(fuzz_cases.make_spec(3, i)) for i in range(40)]
    other = [dataclasses.asdict(fuzz_cases.make_spec(4, i)) for i in range(40)]
    assert sum(a != b for a, b in zip(first[2:], other[2:])) == 38
    for i in (0, 7, 11):
        a, b = fuzz_cases.build(fuzz_cases.make_spec(3, i)), fuzz_cases.build(fuzz_cases.make_spec(3, i))
        assert a.held.keys() == b.held.keys()
        assert all(fuzz._same(a.held[n].base, b.held[n].base) for n in a.held)  # bits: NaN garbage too
    # --case I is case I of the full list
    assert run(["--seed", "3", "--cases", "12", "--dry-run"]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert run(["--seed", "3", "--case", "9", "--dry-run"]) == 0
    assert capsys.readouterr().out.splitlines() == [listing[9]]


# -- Triton interpreter (fp16 / fp8 only: it computes bf16 wrongly) ------------------------------


def _small_fp16_cases(count: int, seed: int = 0) -> list:
    picks = []
    for i in range(len(fuzz_cases.REGRESSIONS), 400):
        spec = fuzz_cases.make_spec(seed, i)
        work = sum(q * max(k, 1) for q, k in zip(spec.q_lens, spec.k_lens)) * spec.hq
        if spec.q_dtype == "fp16" and work <= 20_000 and sum(spec.k_lens) <= 600:
            picks.append(i)
        if len(picks) == count:
            return picks
    return picks


@pytest.fixture
def triton_interpreter(monkeypatch):
    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed")
    # Triton decides interpreted vs compiled when a kernel is decorated (tests/helpers.py); the
    # dispatch reads the variable per call, so it stays set while the test runs
    interpreted_triton_fwd()
    monkeypatch.setenv("TRITON_INTERPRET", "1")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter path; GPUs run Triton compiled")
def test_triton_interpreter_cases(triton_interpreter, tmp_path):
    cases = _small_fp16_cases(6)
    path = tmp_path / "fuzz.json"
    assert run(["--kernel", "triton", "--case", ",".join(map(str, cases)), "--device", "cpu", "--json", str(path)]) == 0
    report = json.loads(path.read_text())
    assert report["summary"]["triton"]["pass"] == len(cases) == 6
    assert {c["results"]["triton"]["ran"] for c in report["cases"]} == {"triton"}
    assert {c["spec"]["kv_dtype"] for c in report["cases"]} == {"fp8", "fp16"}


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter path; GPUs run Triton compiled")
def test_triton_warm_worker_runs_the_cases_calls(triton_interpreter):
    cases = _small_fp16_cases(2, seed=1)
    assert fuzz._triton_warm_worker((1, cases, fuzz_cases.DEFAULT_VARIANTS, "cpu")) == len(cases) == 2


def test_triton_warm_shares_give_each_compile_key_one_process():
    # fuzz.triton_shares: every case Triton plans is in exactly one share, and no compile key
    # is in two shares, so no process compiles what another compiles
    target = "sm_90:132"
    specs = [fuzz_cases.make_spec(0, i) for i in range(120)]
    shares = fuzz.triton_shares(specs, target, 8)
    keys = {}
    for spec in specs:
        call, _, _ = fuzz_cases.call_on(fuzz_cases.build(spec), torch.device("cpu"))
        try:
            keys[spec.index] = fuzz.triton_compile_key(fa512.plan(**call, kernel="triton", target=target))
        except (fa512.KernelUnavailableError, ValueError):
            pass
    assert sorted(i for share in shares for i in share) == sorted(keys)
    owner = {}
    for j, share in enumerate(shares):
        for i in share:
            assert owner.setdefault(keys[i], j) == j, f"key of case {i} in shares {owner[keys[i]]} and {j}"
    assert 1 < len(shares) <= 8 and len(owner) < len(keys)


# -- GPU ----------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["fp8_mma", "mma16", "triton", "auto"])
def test_gpu_500_cases(kernel, tmp_path):
    """500 cases of one kernel on the H200: no failure, and the kernel itself served every case it
    did not refuse. Once compiled ~10-30 s each; a machine's first run compiles (module docstring)."""
    path = tmp_path / "fuzz.json"
    rc = run(["--kernel", kernel, "--cases", "500", "--device", "cuda", "--json", str(path)])
    report = json.loads(path.read_text())
    results = [(c["index"], c["results"][kernel]) for c in report["cases"]]
    failed = [(i, r["problems"]) for i, r in results if r["status"] == "fail"]
    assert rc == 0 and not failed, failed[:10]
    summary = report["summary"][kernel]
    assert summary["cases"] == 500 and summary["pass"] >= 150, summary
    ran = {r["ran"] for _, r in results if r["status"] == "pass"}
    if kernel == "auto":  # each case checked that the planned kernel ran (fuzz.run_kernel)
        assert "fp8_mma" in ran and ran <= {"fp8_mma", "mma16", "triton"}, ran
    else:
        assert ran == {kernel}, ran


# -- the emulation's resolution (fp8_mma's oracle) ------------------------------------------------


def _emulation_inputs(index):
    from fa512.tools.fuzz import _emulation_metrics

    spec = fuzz_cases.make_spec(0, index)
    built = fuzz_cases.build(spec)
    call, oracle, _ = fuzz_cases.call_on(built, torch.device("cpu"))
    plan = fa512.plan(**call, kernel="fp8_mma", target="sm_90:132")
    record = {"kernel": "fp8_mma", "num_splits": plan.num_splits, "config": plan.config}
    return oracle, record, built.valid_rows, _emulation_metrics


def test_emulation_resolution_explains_the_few_key_case():
    # Seed 0 case 96 (20 queries, window [1, 55], fp16 q) failed on the H200 at vs_emu 5.32e-4
    # against the 5e-4 bar; the emulation under a 2-ulp exp2 error (ex2.approx's) moves as far.
    from fa512.numerics.emulation import emulate_attention, fp8_mma_design
    from fa512.tools.fuzz import EMULATION_BAR, emulation_resolution

    oracle, record, rows, metrics = _emulation_inputs(96)
    design = fp8_mma_design(record["config"].with_split(record["num_splits"] > 1))
    emu, emu_lse = emulate_attention(**oracle, num_splits=record["num_splits"], design=design)
    res = emulation_resolution(oracle, design, record["num_splits"], emu[:rows].double(), rows)
    assert 0.5 * EMULATION_BAR < res < 4 * EMULATION_BAR
    # A kernel output that is the emulation with flipped P passes; one off by more does not.
    flipped, _ = emulate_attention(**oracle, num_splits=record["num_splits"],
                                   design=dataclasses.replace(design, exp2_ulps=2))
    m = metrics(flipped, emu_lse, oracle, record, rows)
    assert m["vs_emu"] > EMULATION_BAR and m["vs_emu"] <= EMULATION_BAR + m["emu_resolution"]
    worse = emu + 3 * (flipped - emu) + 0.01 * emu.abs().amax() * torch.sign(emu)
    m = metrics(worse, emu_lse, oracle, record, rows)
    assert m["vs_emu"] > EMULATION_BAR + m["emu_resolution"]


def test_exact_exp2_is_the_default_design():
    from fa512.numerics.emulation import emulate_attention, fp8_mma_design

    oracle, record, rows, _ = _emulation_inputs(96)
    design = fp8_mma_design(record["config"])
    a, _ = emulate_attention(**oracle, design=design)
    b, _ = emulate_attention(**oracle, design=dataclasses.replace(design, exp2_ulps=0))
    assert torch.equal(a, b)
    with pytest.raises(ValueError, match="exp2_ulps"):
        dataclasses.replace(design, exp2_ulps=-1)


def test_triton_cache_entries_counts_the_disk_cache(tmp_path, monkeypatch):
    # the fuzzer's Triton warm-up reports its compiles as the cache's growth
    from fa512.tools.fuzz import triton_cache_entries

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    for name in ("a", "b", "c"):
        (tmp_path / name).mkdir()
    assert triton_cache_entries() == 3
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "missing"))
    assert triton_cache_entries() == -1
