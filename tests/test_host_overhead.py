"""profiles/host_overhead.py: its stubbed run is the mma16 warm path (memo, launcher, launch state)."""

import json

import pytest
import torch

import fa512
from fa512.launch import memo, run
from helpers import load_profile


@pytest.fixture(scope="module")
def ho():
    return load_profile("host_overhead")


def _small(ho, **over):
    """A benchmark case shrunk to test size (same kinds of tensors as the real one)."""
    case = dict(ho.CASES["decode_fp8_descale"], batch=3, k_len=256, num_splits=1)
    case.update(over)
    return ho.make_call(case, "cpu")


def test_warm_calls_reach_the_stub_kernel_with_each_calls_tensors(ho):
    with ho.stubbed() as stubs:
        q, k, v, kw = _small(ho)
        fa512.attention(q, k, v, **kw)
        q2, k2, v2, _ = _small(ho)
        out2 = torch.empty_like(q2)
        kw["k_descale"].fill_(3.0)
        _, lse = fa512.attention(q2, k2, v2, **kw, out=out2)
        assert memo.size() == 1  # out=None and a contiguous out: one signature
        assert run.last_launch["kernel"] == "mma16"
        a = stubs["fwd"].last_args
        assert stubs["fwd"].calls == 2 and stubs["combine"].calls == 0
        assert a[0] is q2 and a[3] is out2 and a[4] is lse and lse.shape == (32, 3)
        assert a[1].dtype == torch.uint8 and a[1].data_ptr() == k2.data_ptr() and a[2].data_ptr() == v2.data_ptr()
        assert a[5] is kw["cu_seqlens_q"] and a[7] is kw["seqused_k"] and a[8] is kw["page_table"]
        assert a[9] is None and a[10].shape == (3, 4) and a[10][2, 3] == 3.0  # (B, Hkv) descale view
        assert a[12:18] == (1.0, 1 << 30, 1 << 30, 1, 1, 0)  # the scalars
        assert a[18:21] == (None, None, None) and a[21] == 0  # no fused combine, then the stream


def test_splits_run_the_combine_stub(ho):
    # 3 sequences x 4 kv heads x 45 splits, more CTAs than the GPU holds at once: the combine kernel
    with ho.stubbed() as stubs:
        q, k, v, kw = _small(ho, kv_dtype=torch.bfloat16, descale=False, num_splits=45)
        for _ in range(2):
            out, lse = fa512.attention(q, k, v, **kw)
        assert run.last_launch["combine"] == "kernel"
        o_part, lse_part = stubs["fwd"].last_args[3:5]
        assert o_part.shape == (45, 3, 32, 512) and lse_part.shape == (45, 32, 3)
        c = stubs["combine"].last_args
        assert stubs["combine"].calls == 2 and c[0] is o_part and c[2] is out and c[3] is lse and c[5] == 45


def test_small_split_grids_fuse_the_combine_into_the_forward(ho):
    # 2 sequences x 4 kv heads x 16 splits = 128 CTAs of 2 (row, quarter) merges each: the
    # forward merges its partials into out and lse (`Plan.combine` "fused")
    with ho.stubbed() as stubs:
        q, k, v, kw = _small(ho, num_splits=16, batch=2, kernel="fp8_mma")
        for _ in range(2):
            out, lse = fa512.attention(q, k, v, **kw)
        assert run.last_launch["combine"] == "fused" and stubs["combine"].calls == 0
        assert run.last_launch["kernel"] == "fp8_mma"
        a = stubs["fwd"].last_args
        assert a[3].shape == (16, 2, 32, 512) and a[4].shape == (16, 32, 2)  # the partials
        assert a[18] is out and a[19] is lse and a[20].dtype == torch.int32 and a[20].shape == (2048,)


def test_op_and_attention_share_the_launcher(ho):
    with ho.stubbed() as stubs:
        q, k, v, kw = _small(ho)
        out = torch.empty_like(q)
        fa512.attention(q, k, v, **kw, out=out)
        torch.ops.fa512.fwd(*ho.op_args(q, k, v, out, kw))
        assert memo.size() == 1 and stubs["fwd"].calls == 2


def test_alignment_is_checked_on_warm_calls(ho):
    with ho.stubbed():
        q, k, v, kw = _small(ho)
        fa512.attention(q, k, v, **kw)
        buf = torch.empty(q.numel() + 8, dtype=q.dtype)
        q_odd = buf.as_strided(q.shape, q.stride(), storage_offset=1)  # same signature, 2-byte aligned
        with pytest.raises(ValueError, match="16-byte aligned"):
            fa512.attention(q_odd, k, v, **kw)


def test_stubbed_restores_what_it_patched(ho):
    before = (memo.target_of, hasattr(torch._C, "_cuda_getCurrentRawStream"))
    with ho.stubbed():
        assert memo.target_of(torch.device("cpu")).is_sm90
    assert (memo.target_of, hasattr(torch._C, "_cuda_getCurrentRawStream")) == before
    assert "unavailable" not in vars(fa512.backends.registry.BACKENDS["mma16"])


def test_main_writes_rows_for_every_entry_point(ho, tmp_path, capsys):
    path = tmp_path / "rows.json"
    assert ho.main(["--case", "decode_tiny", "--repeats", "2", "--calls", "3", "--stub", "--json", str(path)]) == 0
    rows = json.loads(path.read_text())["rows"]
    assert [r["api"] for r in rows] == list(ho.APIS)
    assert all(r["kernel"] == "mma16" and r["host_us_min"] > 0 for r in rows)
    assert "decode_tiny" in capsys.readouterr().out


def test_warm_launch_passes_what_a_one_off_launch_passes(ho):
    """A warm call goes through the memo's `CuteLauncher`; it must hand the kernel exactly the
    arguments a one-off `Mma16Backend.launch` of the same plan would (tensors by identity or
    same data, scalars, stream)."""
    with ho.stubbed() as stubs:
        q, k, v, kw = _small(ho)
        out = torch.empty_like(q)
        call = ho.op_args(q, k, v, out, kw)
        run.run(call)  # cold: checks, plans, builds the launcher
        run.run(call)
        warm_args = stubs["fwd"].last_args
        launcher = memo.launcher_for(call)
        fa512.backends.registry.BACKENDS["mma16"].launch(launcher.plan, launcher.args(call), out)
        slow_args = stubs["fwd"].last_args
        assert stubs["fwd"].calls == 3 and len(warm_args) == len(slow_args)
        for i, (a, b) in enumerate(zip(warm_args, slow_args)):
            if i == 4:  # lse: a fresh tensor per call
                assert a.shape == b.shape and a.dtype == b.dtype and a is not b
            elif isinstance(a, torch.Tensor):
                assert a.dtype == b.dtype and a.shape == b.shape and a.data_ptr() == b.data_ptr()
            else:
                assert a == b


def test_breakdown_times_every_piece_on_the_stub(ho, capsys):
    assert ho.main(["--case", "decode_tiny", "--stub", "--breakdown"]) == 0
    text = capsys.readouterr().out
    for piece in ("run (whole eager op body)", "signature", "memo lookup", "launcher (descale views", "torch.empty lse"):
        assert piece in text
