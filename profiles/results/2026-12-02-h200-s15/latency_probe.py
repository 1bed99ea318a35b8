"""Which latency row of `fa512 bench --modes latency` faults: each (case, variant) in its own
process, CUDA_LAUNCH_BLOCKING=1, quick reps; prints one status line per row."""
import json, os, subprocess, sys

if len(sys.argv) > 2:  # child: case index, variant label
    import torch
    from fa512.tools import bench
    from fa512.tools.bench_grid import LATENCY_CASES, VARIANTS
    case = LATENCY_CASES[int(sys.argv[1])]
    variant = next(v for v in VARIANTS if v[0] == sys.argv[2])
    dev = torch.device("cuda")
    import traceback
    orig = bench._failure_status
    bench._failure_status = lambda exc: (traceback.print_exception(exc), orig(exc))[1]
    row = bench.bench_latency(case, variant, dev, bench.rep_budget(True), 60 << 20, 7)
    print("ROW0", row.get("status"), flush=True)
    torch.cuda.synchronize()
    print("ROW", json.dumps({k: row.get(k) for k in ("case", "variant", "status", "us", "copy_us", "pct_copy", "num_splits", "ctas", "n_sets")}))
else:
    from fa512.tools.bench_grid import LATENCY_CASES
    env = dict(os.environ, CUDA_LAUNCH_BLOCKING=os.environ.get("BLOCKING", "1"))
    for i, c in enumerate(LATENCY_CASES):
        for v in c.variants:
            p = subprocess.run([sys.executable, __file__, str(i), v], env=env, capture_output=True, text=True, timeout=300)
            line = next((l for l in p.stdout.splitlines() if l.startswith("ROW ")), None)
            print(c.name, v, "rc", p.returncode, line or (p.stderr.strip().splitlines() or ["?"])[-1][:300], flush=True)
