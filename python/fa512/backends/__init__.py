"""The kernels behind the dispatch table (`registry.BACKENDS`), each behind `base.Backend`:
the float32 reference (`reference`), Triton (`triton`, kernels in `triton_fwd`) and the SM90
CuTe DSL family (`cute`: mma16 and fp8_mma), with its compile cache (`compile_cache`) and the
launch shim its direct launches record through (`launch_shim`)."""
