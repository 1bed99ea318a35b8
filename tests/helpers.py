"""Test-side builders for varlen / paged problems (small shapes, seeded, never zeros)."""

from __future__ import annotations

import contextlib
import importlib.util
import os

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_profile(name: str):
    """A script of profiles/ as a module (they are not a package)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "profiles", f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@contextlib.contextmanager
def triton_interpret_env():
    """TRITON_INTERPRET=1 while the block runs (Triton reads it when a function is decorated),
    then the variable as it was."""
    previous = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        yield
    finally:
        if previous is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = previous


def interpreted_triton_fwd():
    """fa512.backends.triton_fwd with its kernels under the Triton interpreter (CPU tensors).

    Triton decides interpreted vs compiled when a kernel is decorated, so the module is imported
    (or reloaded) with TRITON_INTERPRET=1, and the variable is then restored: the op's dispatch
    reads it per call, so callers set it while their interpreted calls run.
    """
    import sys

    with triton_interpret_env():
        if "fa512.backends.triton_fwd" in sys.modules:
            return importlib.reload(sys.modules["fa512.backends.triton_fwd"])
        return importlib.import_module("fa512.backends.triton_fwd")


D = 512


def make_problem(
    q_lens,
    k_lens,
    hq=4,
    hkv=2,
    page_size=16,
    paged=True,
    q_dtype=torch.float16,
    kv_dtype=torch.float16,
    seed=0,
    extra_pages=3,
    shuffle_pages=True,
    device="cpu",
):
    """Random q/k/v plus metadata; returns a dict of `fa512.attention` keyword arguments."""
    g = torch.Generator().manual_seed(seed)
    b = len(q_lens)
    total_q = sum(q_lens)
    q = torch.randn(total_q, hq, D, generator=g).to(q_dtype)
    cu_q = torch.tensor([0] + list(torch.tensor(q_lens).cumsum(0).tolist()), dtype=torch.int32)
    used = torch.tensor(k_lens, dtype=torch.int32)
    kw = dict(cu_seqlens_q=cu_q, seqused_k=used, max_seqlen_q=max(q_lens), max_seqlen_k=max(max(k_lens), 1))
    if paged:
        pages_per_seq = [max(1, -(-n // page_size)) for n in k_lens]
        max_pages = max(pages_per_seq)
        num_pages = sum(pages_per_seq) + extra_pages
        order = torch.randperm(num_pages, generator=g) if shuffle_pages else torch.arange(num_pages)
        table = torch.zeros(b, max_pages, dtype=torch.int32)
        nxt = 0
        for i, n in enumerate(pages_per_seq):
            table[i, :n] = order[nxt : nxt + n].int()
            nxt += n
        k = torch.randn(num_pages, page_size, hkv, D, generator=g)
        v = torch.randn(num_pages, page_size, hkv, D, generator=g)
        kw["page_table"] = table
    else:
        total_k = sum(k_lens) + 5
        cu_k = torch.tensor([0] + list(torch.tensor(k_lens).cumsum(0).tolist()), dtype=torch.int32)
        k = torch.randn(total_k, hkv, D, generator=g)
        v = torch.randn(total_k, hkv, D, generator=g)
        kw["cu_seqlens_k"] = cu_k
    k, v = k.to(kv_dtype), v.to(kv_dtype)
    kw = {name: t.to(device) if isinstance(t, torch.Tensor) else t for name, t in kw.items()}
    return q.to(device), k.to(device), v.to(device), kw


def rel_l2(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def naive_attention(q, keys, values, scale, causal=False, window_left=-1, window_right=-1, qd=1.0, kd=1.0, vd=1.0):
    """Loop-per-row float64 attention for one (sequence, query head): q (L, D), keys/values (K, D)."""
    import math

    L, K = q.shape[0], keys.shape[0]
    if causal:
        window_right = 0
    out = torch.zeros(L, q.shape[1], dtype=torch.float64)
    lse = torch.full((L,), -math.inf, dtype=torch.float64)
    for i in range(L):
        pos = K - L + i
        js = [
            j
            for j in range(K)
            if (window_right < 0 or j <= pos + window_right) and (window_left < 0 or j >= pos - window_left)
        ]
        if not js:
            continue
        s = torch.stack([(q[i].double() @ keys[j].double()) * scale * qd * kd for j in js])
        m = s.max()
        p = torch.exp(s - m)
        out[i] = (p[:, None] * values[js].double()).sum(0) / p.sum() * vd
        lse[i] = m + torch.log(p.sum())
    return out, lse


def op_args(q, k, v, out, kw, **over):
    """The op's 20 arguments as a `fa512.call.Call` (schema order), with test defaults (causal,
    descales)."""
    from fa512.call import Call

    a = dict(
        page_table=kw.get("page_table"), cu_seqlens_k=kw.get("cu_seqlens_k"), cu_seqlens_q=kw["cu_seqlens_q"],
        max_seqlen_q=kw["max_seqlen_q"], seqused_k=kw["seqused_k"], max_seqlen_k=kw["max_seqlen_k"],
        softmax_scale=0.05, causal=True, window_left=-1, window_right=-1, q_descale=None,
        k_descale=torch.tensor([0.5, 2.0]), v_descale=torch.tensor(1.5), num_splits=0, kernel="auto",
        precision="auto",
    )
    a.update(over)
    return Call(q, k, v, out, *a.values())
