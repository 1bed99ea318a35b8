#!/usr/bin/env bash
# Trees of main plus one profiles/wip patch each, built and tested side by side on the GPU
# machine (DSL env sourced, repository root = main). A patch that breaks its tree then breaks
# only its own tests: session 17 applied three patches to one tree, one of them broke split
# decode, and the whole tree's suite and A/B were lost.
#   bash profiles/wip_trees.sh build NAME...    /root/wip_NAME = this tree + profiles/wip/NAME.patch
#   bash profiles/wip_trees.sh build_set SET NAME...  /root/wip_SET = this tree + the NAME patches, in order
#   bash profiles/wip_trees.sh fill NAME...     compile caches of main and of each tree, in parallel
#   bash profiles/wip_trees.sh kernels NAME...  the GPU suite's kernel half in each tree, in parallel
#   bash profiles/wip_trees.sh tools NAME...    the GPU suite's tools half in each tree, one at a time
# NAME "main" means this tree itself. Caches are /root/cache_<tree dir name>, as ab_trees.sh
# names them, so `bash profiles/ab_trees.sh /root/wip_NAME . new base base new` (FILL=0) follows.
# Logs: $OUT/<step>_<NAME>.log, one status line per tree on stdout.
set -u
step=$1; shift
OUT=${OUT:-out/wip_trees}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)  # absolute: steps write it from inside the trees
ROOT=$PWD
# A file a tree lacks (a patch's new test module, in main) is left out of that tree's run
# (`existing`); tests/test_wip_patches.py checks that every GPU-marked module is in one list.
KERNEL_HALF="tests/test_cute_compile.py tests/test_native.py tests/test_fp8_operands.py tests/test_emulation.py tests/test_sanitize.py tests/test_garbage_slots.py tests/test_many_splits.py tests/test_precision.py"
# The tools half runs as two groups side by side: the GPU fuzz (4 kernels x 500 cases) and the rest.
# One after the other they took 777 s in session 19, the chain's longest step.
TOOLS_FUZZ="tests/test_fuzz.py"
TOOLS_REST="tests/test_triton_fwd.py tests/test_transformers_integration.py tests/test_tools.py tests/test_distributed.py"
tree_of() { if [ "$1" = main ]; then echo "$ROOT"; else echo "/root/wip_$1"; fi; }
source "$(dirname "$0")/tree_cache.sh"
in_tree() {  # NAME command...: run in the tree with its own cache and sources first on the path
  local dir; dir=$(tree_of "$1"); shift
  ( cd "$dir" && PYTHONPATH=python:.:${PYTHONPATH:-} FA512_CACHE_DIR=$(cache_of "$dir") "$@" )
}
existing() { for f in "$@"; do [ -e "$f" ] && echo "$f"; done; }  # run inside a tree
gpu_tests() {  # SECONDS "FILES" pytest-args...: the GPU tests of the FILES this tree has
  local limit=$1 files=$2; shift 2
  timeout "$limit" python3 -m pytest -q -m gpu $(existing $files) "$@"
}
summary() { grep -E "[0-9]+ (passed|failed)|[0-9]+ errors?( |$)" "$1" | tail -n 1 | cut -c1-140; }
case $step in
  build|build_set)
    if [ "$step" = build_set ]; then sets="$1"; shift; else sets="$*"; fi
    for name in $sets; do
      dir=/root/wip_$name
      rm -rf "$dir" && mkdir -p "$dir"
      cp -r python cute_kernels csrc tests profiles docs pyproject.toml setup.py CMakeLists.txt README.md "$dir"/
      rm -rf "$dir/profiles/results"
      applied=0
      for patch in $( [ "$step" = build_set ] && echo "$@" || echo "$name" ); do
        if (cd "$dir" && patch -p1 --forward --batch < "$ROOT/profiles/wip/$patch.patch" >> "$OUT/build_$name.log" 2>&1); then
          applied=$((applied + 1))
        else
          echo "build $name: PATCH $patch FAILED (see $OUT/build_$name.log)"
          touch "$dir/BUILD_FAILED"
        fi
      done
      [ -e "$dir/BUILD_FAILED" ] || echo "build $name: ok ($applied patch(es), $(grep -c '^patching file' "$OUT/build_$name.log") files)"
    done ;;
  fill)  # main is always filled; a NAME "main" is not filled twice. A patch that changes no
    # kernel source (cute_kernels/, the compile cache) shares main's cache: session 18's five
    # parallel fills took 189 s, against ~85 s for three.
    names="main $(printf '%s\n' "$@" | grep -vx main | tr '\n' ' ')"
    declare -A pid
    for name in $names; do
      patch_file=$ROOT/profiles/wip/$name.patch  # a set tree (build_set) has none: its own cache
      if [ "$name" != main ] && [ -f "$patch_file" ] && \
          ! grep -qE '^diff --git a/(cute_kernels/|python/fa512/backends/(compile_cache|launch_shim)\.py)' "$patch_file"; then
        rm -rf "$(cache_of "$(tree_of "$name")")"
        ln -s "$(cache_of "$ROOT")" "$(cache_of "$(tree_of "$name")")"
        echo "fill $name: shares main's cache (the patch changes no kernel source)"
        continue
      fi
      in_tree "$name" timeout 400 python3 -m fa512 compile --fill-cache --jobs 6 > "$OUT/fill_$name.log" 2>&1 &
      pid[$name]=$!
    done
    for name in "${!pid[@]}"; do
      wait "${pid[$name]}"; rc=$?
      echo "fill $name: rc=$rc $(tail -n 1 "$OUT/fill_$name.log" | cut -c1-120)"
    done ;;
  kernels)
    declare -A pid
    for name in "$@"; do
      in_tree "$name" gpu_tests 580 "$KERNEL_HALF" -rs -p no:cacheprovider --durations=15 \
        > "$OUT/kernels_$name.log" 2>&1 &
      pid[$name]=$!
    done
    for name in "$@"; do
      wait "${pid[$name]}"; rc=$?
      echo "kernels $name: rc=$rc $(summary "$OUT/kernels_$name.log")"
      grep -E "^FAILED" "$OUT/kernels_$name.log" | head -n 12
    done ;;
  tools)  # the fuzz's tests one process each (one process for all four took 482 s on an H100,
    # 2026-12-06), beside the rest (~250 s); start it detached all the same
    # TOOLS_PART=fuzz | rest: one group only (gpu_unit.sh, a call each)
    for name in "$@"; do
      fuzz_pids=() i=0
      if [ "${TOOLS_PART:-}" != rest ]; then
        # node ids: a single -q lists them (-q twice prints per-file counts: session 33's grep found none)
        ids=$(in_tree "$name" python3 -m pytest --collect-only -q -m gpu $TOOLS_FUZZ -p no:cacheprovider 2>/dev/null \
              | grep '::')
        [ -n "$ids" ] || echo "tools $name (fuzz): NO TESTS COLLECTED from $TOOLS_FUZZ"
        # one compile pool for the four kernels' cases first (the tests' 500 cases, seed 0): four
        # processes that each compiled with a pool per core ran >590 s on an H100 (2026-12-07)
        in_tree "$name" timeout 400 python3 -m fa512 fuzz --cases 500 --device cuda \
          --kernel fp8_mma,mma16,triton,auto --prepare-only > "$OUT/tools_fuzz_${name}_prepare.log" 2>&1
        echo "tools $name (fuzz prepare): rc=$? $(tail -n 1 "$OUT/tools_fuzz_${name}_prepare.log" | cut -c1-120)"
        while read -r id; do  # (ids hold brackets: no word splitting and globbing)
          [ -n "$id" ] || continue
          i=$((i + 1))
          # -s: the run's own timing lines reach the log, so a cut call shows where it was
          in_tree "$name" timeout 900 python3 -m pytest -q -s -m gpu "$id" -rs -p no:cacheprovider \
            > "$OUT/tools_fuzz_${name}_$i.log" 2>&1 &
          fuzz_pids+=($!)
        done <<< "$ids"
      fi
      if [ "${TOOLS_PART:-}" != fuzz ]; then
        in_tree "$name" timeout 900 python3 -m pytest -q -m gpu $TOOLS_REST -rs -p no:cacheprovider \
          --durations=15 > "$OUT/tools_$name.log" 2>&1
        rc=$?
        echo "tools $name: rc=$rc $(summary "$OUT/tools_$name.log")"
      fi
      i=0
      for pid in "${fuzz_pids[@]}"; do
        i=$((i + 1)); wait "$pid"; fuzz_rc=$?
        echo "tools $name (fuzz $i): rc=$fuzz_rc $(summary "$OUT/tools_fuzz_${name}_$i.log")"
      done
    done ;;
  *) echo "unknown step $step (build, fill, kernels, tools)"; exit 2 ;;
esac
