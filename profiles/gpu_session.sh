#!/usr/bin/env bash
# One batched H200 session: each step under its own timeout, its log under $OUT/<step>.log, a
# one-line status per step at the end. Usage (repository root, DSL environment sourced):
#   bash profiles/gpu_session.sh STEP [STEP ...]      steps: see the case statement below
set -u
OUT=${OUT:-out/gpu_session}
mkdir -p "$OUT"
export PYTHONPATH=python:.:${PYTHONPATH:-}
export FA512_CACHE_DIR=${FA512_CACHE_DIR:-/root/fa512cache}
status=()
run() {  # name seconds command...
  local name=$1 secs=$2; shift 2
  local t0=$(date +%s)
  timeout --kill-after=10 "$secs" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  status+=("$name rc=$rc $(( $(date +%s) - t0 ))s: $(tail -n 1 "$OUT/$name.log" | cut -c1-150)")
}
smoke="python3 profiles/gpu_mma16_smoke.py --timeout 240 --kernel-timeout 30"
for step in "$@"; do
  case $step in
    dump)        mkdir -p "$OUT/dump"; run dump 200 python3 profiles/fp8_dump.py "$OUT/dump" ;;
    sel_tests)   run sel_tests 580 python3 -m pytest -q -m gpu tests/test_cute_compile.py tests/test_fp8_operands.py tests/test_memo.py tests/test_host_overhead.py tests/test_native.py tests/test_emulation.py -rs ;;
    native_tests) run native_tests 300 python3 -m pytest -q tests/test_native.py -rs ;;
    probes)      run probes 300 python3 -m pytest -q -m gpu tests/test_fp8_operands.py -rs ;;
    diag_fp8)    run diag_fp8 400 $smoke --diag --case fp8_mma --out "$OUT/diag_fp8" ;;
    fp8_quick)   run fp8_quick 500 $smoke --fp8 --quick --no-perf --out "$OUT/fp8_quick" ;;
    fp8_full)    run fp8_full 580 $smoke --fp8 --out "$OUT/fp8_full" ;;
    fp8_perf)    run fp8_perf 400 $smoke --fp8 --case perf_ --out "$OUT/fp8_perf" ;;
    perf_fp8)    run perf_fp8 400 $smoke --fp8 --perf-only --out "$OUT/perf_fp8" ;;
    perf_fp8_prefill) run perf_fp8_prefill 300 $smoke --fp8 --perf-only --case ceiling_fp8,prefill8192_causal_fp8_mma --out "$OUT/perf_fp8_prefill" ;;
    perf8_*)     # FP8-suite timings by name substrings joined with '-': perf8_<a>-<b>-...
      run "$step" 400 $smoke --fp8 --perf-only --case "$(echo "${step#perf8_}" | tr - ,)" --out "$OUT/$step" ;;
    perf_mma16)  run perf_mma16 400 $smoke --perf-only --out "$OUT/perf_mma16" ;;
    perf16_*)    # mma16-suite timings (A/B cases included) by name substrings joined with '-'
      run "$step" 400 $smoke --perf-only --ab --case "$(echo "${step#perf16_}" | tr - ,)" --out "$OUT/$step" ;;
    mma16case_*) # mma16 correctness cases by name substring: mma16case_<substring>
      run "$step" 300 $smoke --no-perf --case "${step#mma16case_}" --out "$OUT/$step" ;;
    mma16_quick) run mma16_quick 500 $smoke --quick --out "$OUT/mma16_quick" ;;
    gpu_tests)   run gpu_tests 580 python3 -m pytest -q -m gpu tests -x -rs ;;  # > 580 s on a fresh machine: use the halves
    # the whole GPU suite in two halves: kernels 175 s, tools 657 s on 2026-12-02 (over the 600 s a call
    # may run: start the tools half in the background, as profiles/results/2026-12-02-h200-s16/s16_a.sh does)
    gpu_tests_kernels) run gpu_tests_kernels 580 python3 -m pytest -q -m gpu --durations=15 tests/test_cute_compile.py tests/test_native.py tests/test_fp8_operands.py tests/test_emulation.py tests/test_sanitize.py tests/test_garbage_slots.py tests/test_many_splits.py -rs ;;
    gpu_tests_tools)   run gpu_tests_tools 580 python3 -m pytest -q -m gpu --durations=15 tests/test_triton_fwd.py tests/test_fuzz.py tests/test_transformers_integration.py tests/test_tools.py tests/test_distributed.py -rs ;;
    hf_tests)    run hf_tests 580 python3 -m pytest -q tests/test_transformers_integration.py -rs ;;  # issue 25 acceptance
    hf_4k)       run hf_4k 580 python3 profiles/transformers_gemma4.py --prompt-len 4096 --new-tokens 32 ;;
    hf_32k)      run hf_32k 580 python3 profiles/transformers_gemma4.py --prompt-len 32768 --new-tokens 8 ;;
    hf_pad)      run hf_pad 400 python3 profiles/transformers_gemma4.py --prompt-len 4096 --batch 4 --pad 1000 --new-tokens 16 ;;
    split_breakdown) run split_breakdown 300 python3 profiles/split_breakdown.py ;;  # issue 22: call vs forward alone vs unsplit
    split_sweep) run split_sweep 400 bash -c "for k in fp8_mma mma16-bf16; do python3 profiles/split_breakdown.py --kernel \$k --sweep 8,16,24,32,48,64,96,128,192,256; done" ;;  # the planner refit's data
    latency_kernels) run latency_kernels 200 python3 profiles/latency_kernels.py --splits 0,1,8 ;;  # kernels per call, device time each
    kernel_timeline) run kernel_timeline 240 python3 profiles/kernel_timeline.py ;;  # CTA (0,0,0)'s clock per event; launch/setup cuts
    timeline_prefill) run timeline_prefill 300 python3 profiles/kernel_timeline.py --case "prefill 2k causal,prefill 8 x 1k,prefill 8k causal" ;;  # issue 23: a short prefill CTA's fixed cost
    many_splits) run many_splits 300 python3 -m pytest -q -m gpu tests/test_many_splits.py -rs ;;
    launch_cost) run launch_cost 120 bash -c "nvcc -O2 -arch=sm_90a -o /tmp/launch_cost profiles/launch_cost.cu -lcuda && /tmp/launch_cost" ;;
    overhead)    run overhead 300 python3 profiles/host_overhead.py --repeats 101 --calls 32 ;;
    overhead_bd) run overhead_bd 300 python3 profiles/host_overhead.py --breakdown --floor --case decode_tiny decode_tiny_splits decode_b4_splits5 prefill_tiny_prepass decode_fp8 decode_bf16_splits ;;
    check)       run check 580 python3 -m fa512 check ;;
    fill_cache)  run fill_cache 300 python3 -m fa512 compile --fill-cache --jobs 16 ;;  # every variant into FA512_CACHE_DIR first
    fuzz)        run fuzz 580 python3 -m fa512 fuzz --cases 500 --kernel fp8_mma,mma16,triton --json "$OUT/fuzz.json" ;;
    sanitize)    run sanitize 590 python3 -m fa512 sanitize --timeout 560 ;;
    sanitize_*)  # one tool over every variant: sanitize_<memcheck|racecheck|synccheck|initcheck>
      run "$step" 590 python3 -m fa512 sanitize --tools "${step#sanitize_}" --timeout 560 ;;
    bench)       run bench 580 python3 -m fa512 bench --quick --out "$OUT/bench" ;;
    ab)          run ab 400 python3 -m fa512 ab --quick --out "$OUT/ab" ;;
    nsys)        run nsys 200 python3 profiles/nsys_run.py --case decode --kernel auto --kv fp8 --out "$OUT/nsys" ;;
    ab_retrieval) run ab_retrieval 300 python3 -m fa512 ab --sweeps scale --families retrieval --no-plots --out "$OUT/ab_retrieval" ;;
    ab_sink)     run ab_sink 300 python3 -m fa512 ab --sweeps scale --families sink --no-plots --out "$OUT/ab_sink" ;;
    ab_scale)    run ab_scale 420 python3 -m fa512 ab --sweeps scale --families gaussian,sink,retrieval --no-plots --out "$OUT/ab_scale" ;;
    mma16_full)  run mma16_full 580 $smoke --no-perf --out "$OUT/mma16_full" ;;
    retrieval)   run retrieval 400 $smoke --fp8 --no-perf --case retrieval --out "$OUT/retrieval" ;;
    fp8cases_*)  # FP8-suite correctness cases by name substrings joined with '-': fp8cases_<a>-<b>-...
      run "$step" 500 $smoke --fp8 --no-perf --case "$(echo "${step#fp8cases_}" | tr - ,)" --out "$OUT/$step" ;;
    fp8case_*)   # one case of the full FP8 suite by name substring: fp8case_<substring>
      run "$step" 200 $smoke --fp8 --no-perf --case "${step#fp8case_}" --out "$OUT/$step" ;;
    acc_probe)   mkdir -p "$OUT/acc_probe"; run acc_probe 120 python3 profiles/fp8_acc_probe.py "$OUT/acc_probe" ;;
    ab_mask)     run ab_mask 400 python3 -m fa512 ab --sweeps mask --no-plots --out "$OUT/ab_mask" ;;
    ncu_deq_*)   # ncu --set full on the dequant control: ncu_deq_<decode|prefill>
      run "$step" 300 python3 profiles/nsys_run.py --case "${step#ncu_deq_}" --kernel mma16 --kv fp8 --ncu --out "$OUT/$step" ;;
    ncu_src_*)   # ncu --set full on a causal prefill of 8192 (ncu_src_<fp8_mma|mma16>, fp8 KV), then its
                 # per-instruction stall samples (profiles/ncu_source_summary.py); the report stays on the machine
      run "$step" 300 python3 profiles/nsys_run.py --case prefill --kernel "${step#ncu_src_}" --kv fp8 --ncu --out "/tmp/$step"
      run "${step}_source" 120 bash -c "ncu --import /tmp/$step/*.ncu-rep --page source --csv --print-source sass > /tmp/$step/source.csv && ncu --import /tmp/$step/*.ncu-rep --page details --csv > /tmp/$step/details.csv && python3 profiles/ncu_source_summary.py /tmp/$step/source.csv /tmp/$step/details.csv && gzip -c /tmp/$step/source.csv > $OUT/${step}_source.csv.gz" ;;
    cp_tests)    run cp_tests 500 python3 -m pytest -q -m gpu tests/test_distributed.py -rs -s ;;  # 2 GPUs
    cp_check)    run cp_check 400 python3 profiles/cp_decode.py --spawn --check --out "$OUT/cp" ;;  # 2 GPUs
    cp_decode_*) # 2 GPUs, 256k keys B=4: cp_decode_<interleaved|contiguous>
      run "$step" 500 torchrun --standalone --nproc-per-node 2 profiles/cp_decode.py --placement "${step#cp_decode_}" --out "$OUT/cp" ;;
    nsys_ncu)    run nsys_ncu 300 python3 profiles/nsys_run.py --case decode --kernel fp8_mma --kv fp8 --ncu --out "$OUT/nsys_ncu" ;;
    race_probe)  # racecheck on a bare named-barrier hand-off, writer arriving or syncing (profiles/racecheck_barrier_probe.py)
      run race_probe 200 bash -c 'for m in arrive sync; do compute-sanitizer --tool racecheck --racecheck-report analysis python3 profiles/racecheck_barrier_probe.py --mode $m; done' ;;
    san_*)       # compute-sanitizer on one tiny diag case: san_<memcheck|racecheck|synccheck>_<case substring>
      tool=$(echo "$step" | cut -d_ -f2); case_=$(echo "$step" | cut -d_ -f3-)
      extra=""; [ "$tool" = racecheck ] && extra="--racecheck-report all"
      # compile outside the sanitizer first: an in-process compile probes driver entry points
      # (cuGetProcAddress), which memcheck reports as host API errors
      run "${step}_warm" 200 $smoke --diag --inline --case "$case_" --kernel-timeout 120
      run "$step" 280 compute-sanitizer --tool "$tool" $extra --print-limit 20 \
        $smoke --diag --inline --case "$case_" --kernel-timeout 270 ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
done
printf '%s\n' "${status[@]}"
