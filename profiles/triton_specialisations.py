"""How many Triton compiles the fuzzer's cases cost (CPU, no GPU needed).

Runs the first N fuzz cases of a seed through `fa512.attention(kernel="triton")` with the two
Triton kernels replaced by recorders, and counts the distinct specialisation keys of the
recorded launches the way Triton forms them: tensor dtype and 16-byte alignment, integer class
(== 1, % 16 == 0, other), the constexprs. Twice: with every argument specialised, and with the
arguments the kernels list in ``do_not_specialize`` left plain. Each distinct key is one
compile on a GPU's first run (~1.5 s each on the H200).

    python profiles/triton_specialisations.py --cases 500
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402

import fa512  # noqa: E402
from fa512.backends import triton_fwd  # noqa: E402
from fa512.tools.fuzz_cases import build, call_on, make_spec  # noqa: E402


class _Recorder:
    def __init__(self, fn, name: str, log: list):
        self.fn, self.name, self.log = fn, name, log

    def __getitem__(self, grid):
        return lambda *args, **kw: self.log.append((self.name, args, tuple(sorted(kw.items()))))


def _key(fn, name: str, args: tuple, constexprs: tuple, plain: set) -> tuple:
    parts = []
    for arg_name, a in zip(fn.arg_names, args):
        if isinstance(a, torch.Tensor):
            parts.append((str(a.dtype), None if arg_name in plain else a.data_ptr() % 16 == 0))
        elif isinstance(a, bool) or not isinstance(a, int) or arg_name in plain:
            parts.append(type(a).__name__)
        else:
            parts.append("1" if a == 1 else "16" if a % 16 == 0 else "n")
    return name, tuple(parts), constexprs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=500)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    fns = {"forward": triton_fwd._fwd_kernel, "combine": triton_fwd._combine_kernel}
    # under the interpreter the kernels are InterpretedFunctions: the jit options are not kept
    plain = {"forward": set(triton_fwd._FWD_PLAIN_ARGS), "combine": set(triton_fwd._COMBINE_PLAIN_ARGS)}
    log: list = []
    triton_fwd._fwd_kernel = _Recorder(fns["forward"], "forward", log)
    triton_fwd._combine_kernel = _Recorder(fns["combine"], "combine", log)
    refused = 0
    for index in range(args.cases):
        try:
            call, _, _ = call_on(build(make_spec(args.seed, index)), torch.device("cpu"))
            fa512.attention(**call, kernel="triton")
        except Exception:  # noqa: BLE001 - refused calls launch nothing
            refused += 1
    print(f"{args.cases} cases (seed {args.seed}), {refused} refused, {len(log)} launches")
    for label, use_plain in (("every argument specialised", False), ("do_not_specialize honoured", True)):
        keys = {_key(fns[n], n, a, c, plain[n] if use_plain else set()) for n, a, c in log}
        per = {n: sum(k[0] == n for k in keys) for n in fns}
        print(f"{label:28s} {len(keys):4d} compiles (forward {per['forward']}, combine {per['combine']})")


if __name__ == "__main__":
    main()
