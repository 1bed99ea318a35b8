"""Which decode_alt tiles does racecheck flag? One small call per case, by block count per CTA.

Session 30's racecheck flagged RAW hazards on warpgroup 0's merge value (row max, query pair 0:
K ring + (16 x 128 + t) x 4) read by warpgroup 1's thread t after barrier 8, and only in the split
variants: the sweep's split cases are the only ones whose CTAs hold an odd number of key blocks
(1 each), while its unsplit cases hold 4 and 2. These cases separate the candidates: an odd count
unsplit (ns1, ns3: warpgroup 1's idle barrier pair), an even count split (fu2), a warpgroup 1 with
no block of its own (ns1, fu1) against one with one (ns3, fu3), empty split CTAs beside even ones
(fue). Session 33 (H100, 2026-12-07, the patch's tree, now main): 0 hazards in every case.

    PYTHONPATH=python:. compute-sanitizer --tool racecheck python3 profiles/racecheck_alt_cases.py ns1
    python3 profiles/racecheck_alt_cases.py --list
"""

from __future__ import annotations

import dataclasses
import sys

# name: (fused split variant?, k_lens, splits)
CASES = {
    "ns2": (False, (69,), 1),  # control: 2 blocks, as the sweep's clean unsplit cases
    "ns1": (False, (37,), 1),  # 1 block: warpgroup 1 owns none, passes its barrier pair idle
    "ns3": (False, (150,), 1),  # 3 blocks: warpgroup 1 owns 1, idle pair once
    "fu2": (True, (2048,), 16),  # 16 split CTAs of 2 blocks, fused combine
    "fu1": (True, (1024,), 16),  # 16 split CTAs of 1 block
    "fu3": (True, (3072,), 16),  # 16 split CTAs of 3 blocks
    "fue": (True, (1792,), 16),  # 14 split CTAs of 2 blocks, 2 empty
}


def case(name: str):
    from fa512.tools.sanitize import sweep_cases

    fused, k_lens, splits = CASES[name]
    base = [c for c in sweep_cases("decode_alt") if "-none-" in c.key and "qbf16" in c.key
            and c.key.endswith("-fused") == fused and ("-split-" in c.key) == fused][0]
    return dataclasses.replace(base, q_lens=(1,) * len(k_lens), k_lens=k_lens, num_splits=splits)


def main(argv: list) -> int:
    if argv[:1] == ["--list"]:
        for name in CASES:
            c = case(name)
            print(f"{name}: {c.key}  {c.describe()}")
        return 0
    from fa512.tools.sanitize import run_child

    return run_child([case(argv[0])])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
