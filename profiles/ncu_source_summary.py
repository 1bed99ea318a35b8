"""Summarise Nsight Compute's source page (SASS, warp-stall sampling) of one kernel.

    ncu --import R.ncu-rep --page source --csv --print-source sass > source.csv
    ncu --import R.ncu-rep --page details --csv > details.csv
    python profiles/ncu_source_summary.py source.csv [details.csv]

Prints the kernel's headline metrics (details page), the stall samples summed per SASS opcode,
and the 60 instructions with the most samples, each with its address and text. The column
names differ between ncu versions, so columns are found by substring.
"""

from __future__ import annotations

import csv
import sys
from collections import Counter


def _num(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def _column(header: list, *needles: str) -> int:
    for i, name in enumerate(header):
        if all(n.lower() in name.lower() for n in needles):
            return i
    return -1


def summarise_source(path: str, top: int = 60) -> None:
    with open(path, newline="") as fh:
        rows = [r for r in csv.reader(fh) if r]
    start = next(i for i, r in enumerate(rows) if _column(r, "source") >= 0 and _column(r, "address") >= 0)
    header, body = rows[start], rows[start + 1:]
    src, addr = _column(header, "source"), _column(header, "address")
    samples = _column(header, "warp stall sampling (all")
    not_issued = _column(header, "warp stall sampling (not")
    executed = _column(header, "instructions executed")
    print(f"columns: {header}")
    total = sum(_num(r[samples]) for r in body if len(r) > samples)
    by_op = Counter()
    for r in body:
        if len(r) > samples:
            op = r[src].split()[0] if r[src].split() else "?"
            if op.startswith("@"):
                op = r[src].split()[1] if len(r[src].split()) > 1 else op
            by_op[op.split(".")[0]] += _num(r[samples])
    print(f"\nstall samples: {total:.0f} over {len(body)} instructions")
    print("per opcode (share of samples):")
    for op, n in by_op.most_common(25):
        print(f"  {op:<14} {n / max(total, 1):6.1%}")
    print(f"\ntop {top} instructions (samples, not-issued, executed):")
    ranked = sorted((r for r in body if len(r) > samples), key=lambda r: -_num(r[samples]))
    for r in ranked[:top]:
        ni = _num(r[not_issued]) if not_issued >= 0 else float("nan")
        ex = _num(r[executed]) if executed >= 0 else float("nan")
        print(f"  {r[addr]:>8} {_num(r[samples]) / max(total, 1):6.2%} {ni:8.0f} {ex:10.0f}  {r[src].strip()[:110]}")


def summarise_details(path: str) -> None:
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    header = rows[0]
    sec, name, unit, value = (_column(header, "section name"), _column(header, "metric name"),
                              _column(header, "metric unit"), _column(header, "metric value"))
    keep = ("Duration", "Throughput", "Pipe", "Issue", "Eligible", "Stall", "Bank", "Warp Cycles",
            "Executed Ipc", "Registers", "Shared Memory")
    print("details:")
    for r in rows[1:]:
        if len(r) > value and any(k.lower() in r[name].lower() for k in keep):
            print(f"  {r[sec][:28]:<28} {r[name][:60]:<60} {r[value]:>14} {r[unit]}")


if __name__ == "__main__":
    if len(sys.argv) > 2:
        summarise_details(sys.argv[2])
    summarise_source(sys.argv[1])
