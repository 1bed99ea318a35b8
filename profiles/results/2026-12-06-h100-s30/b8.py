"""decode B=8 x 8192 keys, Hq=8/Hkv=1, fp8 (the latency case that faulted at three stages), eager:
which variant ran and its error against the emulation. Run in the patched tree with
PYTHONPATH=python:.:tests; argument: num_splits (default: planned)."""
import sys

import torch

import fa512
from fa512.launch.run import last_launch
from fa512.numerics.emulation import emulate_attention, fp8_mma_design
from fa512.tools.fuzz import compare
from helpers import make_problem

q, k, v, kw = make_problem([1] * 8, [8192] * 8, hq=8, hkv=1, page_size=64, q_dtype=torch.bfloat16,
                           kv_dtype=torch.float8_e4m3fn, seed=3, device="cuda")
extra = dict(num_splits=int(sys.argv[1])) if len(sys.argv) > 1 else {}
o, l = fa512.attention(q, k, v, **kw, causal=True, kernel="fp8_mma", **extra)
torch.cuda.synchronize()
cfg = last_launch["config"]
print("ran", last_launch.get("kernel"), last_launch.get("num_splits"), last_launch.get("combine"), cfg.layout,
      cfg.kv_stages, flush=True)
eo, el = emulate_attention(q, k, v, **kw, causal=True, design=fp8_mma_design(cfg), num_splits=last_launch["num_splits"])
print(compare(o, l, eo, el, 8), flush=True)
