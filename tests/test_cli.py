"""`python -m fa512 plan` and `python -m fa512 check` on CPU."""

import subprocess
import sys

import pytest


def run(*args):
    return subprocess.run([sys.executable, "-m", "fa512", *args], capture_output=True, text=True, timeout=600)


def test_plan_prints_the_decision():
    r = run("plan", "--batch", "4", "--seqlen-k", "32768", "--target", "cpu", "--num-splits", "3")
    assert r.returncode == 0, r.stderr
    assert "kernel    : reference" in r.stdout and "num_splits: 3" in r.stdout
    assert "B=4 total_q=4 Hq=32 Hkv=4" in r.stdout


def test_plan_for_sm90_names_the_route():
    r = run("plan", "--batch", "4", "--seqlen-k", "32768", "--target", "sm_90:132")
    # fp8 KV decode on SM90 (the CLI's default problem): fp8_mma, 64-key tiles, planned splits
    assert r.returncode == 0, r.stderr
    assert "route     : SM90 + fp8 KV, decode-like" in r.stdout
    assert "kernel    : fp8_mma" in r.stdout and "mma_path='fp8_mma'" in r.stdout
    assert "passed over" not in r.stdout


def test_plan_rejects_bad_kernel():
    r = run("plan", "--kernel", "mma16", "--target", "cpu")
    assert r.returncode != 0 and "kernel='mma16' cannot serve" in r.stderr


@pytest.mark.slow
def test_check_runs_reference_on_cpu():
    r = run("check", "--device", "cpu", "--quick")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("fa512 check on cpu")
    rows = [ln for ln in lines if ln.startswith("reference ")]
    assert len(rows) == 6
    for ln in rows:
        rel_l2 = float(ln.split()[-3])
        assert rel_l2 < 1e-3  # float32 math, fp16 output rounding
    assert any(ln.startswith("not run: mma16") for ln in lines)
