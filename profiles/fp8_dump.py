"""Dump fp8_mma inputs and outputs of a few small cases (for fitting `fa512.numerics.emulation` on CPU).

    PYTHONPATH=python:. python3 profiles/fp8_dump.py OUT_DIR
"""

from __future__ import annotations

import sys

sys.path.insert(0, "profiles")

import torch  # noqa: E402

import gpu_mma16_smoke as smoke  # noqa: E402

CASES = {
    "one_block_std3": dict(hq=8, hkv=1, q_lens=[64], k_lens=[64], page_size=64, kv="fp8"),
    "one_block_std1": dict(hq=8, hkv=1, q_lens=[64], k_lens=[64], page_size=64, kv="fp8", logit_std=1.0),
    "blocks4_std3": dict(hq=8, hkv=1, q_lens=[64], k_lens=[256], page_size=64, kv="fp8"),
    "blocks32_std1": dict(hq=8, hkv=1, q_lens=[64], k_lens=[2048], page_size=64, kv="fp8", logit_std=1.0),
    "v_ones": dict(hq=8, hkv=1, q_lens=[64], k_lens=[64], page_size=64, kv="fp8", v_const=1.0),
    "q_one_hot": dict(hq=8, hkv=1, q_lens=[64], k_lens=[64], page_size=64, kv="fp8", q_one_hot=True),
    # V = identity on the first 64 d: out[:, :, key] is the kernel's e4m3 P(key), normalised
    "p_eye": dict(hq=8, hkv=1, q_lens=[64], k_lens=[64], page_size=64, kv="fp8", v_eye=True),
    "p_eye_std1": dict(hq=8, hkv=1, q_lens=[64], k_lens=[64], page_size=64, kv="fp8", v_eye=True, logit_std=1.0),
    "f16_blocks32_std1": dict(hq=8, hkv=1, q_lens=[64], k_lens=[2048], page_size=64, kv="fp8", logit_std=1.0,
                              dtype="f16"),
}


def main(out_dir: str) -> None:
    for name, case in CASES.items():
        q, k, v, kw = smoke.build(case)
        if case.get("v_const") is not None:
            v = torch.full_like(v.float(), case["v_const"]).to(v.dtype)
        if case.get("v_eye"):
            eye = torch.zeros(v.shape, device=v.device)
            for key in range(64):
                eye[:, key, :, key] = 1.0
            v = eye.to(v.dtype)
        if case.get("q_one_hot"):  # S = K[:, d] for one d per row: QK accumulation of one product
            q = torch.zeros_like(q)
            for r in range(q.shape[0]):
                q[r, :, r % 512] = 1.0
        backend, plan, args, out = smoke.prepare(q, k, v, kw, 1, None, "fp8_mma")
        lse = backend.launch(plan, args, out)
        torch.cuda.synchronize()
        cpu = lambda t: t.cpu() if isinstance(t, torch.Tensor) else t  # noqa: E731
        torch.save(dict(q=q.cpu(), k=k.cpu(), v=v.cpu(), kw={n: cpu(t) for n, t in kw.items()},
                        out=out.cpu(), lse=lse.cpu()), f"{out_dir}/{name}.pt")
        print("dumped", name, flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
