"""The dequant control's converter warps (warps 1-3 of the producer warpgroup, fp8_dequant only).

Every e4m3 K/V block, in the producer's order (K[hi], (K[n], V[n+1])..., V[lo]), from its TMA
staging stage (`kv_stages` deep, one arrive per converter warp) into an f16 stage of the
consumers' two-stage rings (`CVT_F16_STAGES`; 96 producer and 256 consumer thread arrivals).
V rows past seqused_k are written as zeros, so garbage in unused cache slots never reaches O.
The conversion itself (its thread map and batching) is `mma_paths.DequantFp8Path.convert_block`.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float8E4M3FN, Float16

from .config import CVT_F16_STAGES
from .mma_paths import unit_view


class DequantConverter:
    """Compile-time facts: the dequant path object, tile shape, staging depth."""

    def __init__(self, cfg, path):
        self.path = path
        self.tile_n = cfg.tile_n
        self.head_dim = cfg.head_dim
        self.stages = cfg.kv_stages

    @cute.jit
    def convert_kv(self, storage, pipe_k, pipe_v, pipe_kf, pipe_vf, cvt_tidx, seqlen_k, n_min, n_max):
        """The tile's blocks: staging stage -> f16 stage, K and V in the producer's order."""
        kv_bytes = self.tile_n * self.head_dim
        src_k = unit_view(storage.sKs.data_ptr(), self.stages * kv_bytes, Float8E4M3FN)
        src_v = unit_view(storage.sVs.data_ptr(), self.stages * kv_bytes, Float8E4M3FN)
        dst_k = unit_view(storage.sK.data_ptr(), CVT_F16_STAGES * 2 * kv_bytes, Float16)
        dst_v = unit_view(storage.sV.data_ptr(), CVT_F16_STAGES * 2 * kv_bytes, Float16)
        ks_cons = pipe_k.make_consumer()
        vs_cons = pipe_v.make_consumer()
        kf_prod = pipe_kf.make_producer()
        vf_prod = pipe_vf.make_producer()
        n_blocks = n_max - n_min
        # (the pipeline participants advance here, in the loop body: the DSL threads their state
        # through the loop only as local variables)
        if n_blocks > 0:
            self._convert_stage(ks_cons.wait_and_advance(), kf_prod.acquire_and_advance(), src_k, dst_k, cvt_tidx, None)
            for i in cutlass.range(n_blocks - 1, unroll=1):
                n = n_max - 2 - i
                self._convert_stage(ks_cons.wait_and_advance(), kf_prod.acquire_and_advance(), src_k, dst_k,
                                    cvt_tidx, None)
                self._convert_stage(vs_cons.wait_and_advance(), vf_prod.acquire_and_advance(), src_v, dst_v,
                                    cvt_tidx, seqlen_k - (n + 1) * self.tile_n)
            self._convert_stage(vs_cons.wait_and_advance(), vf_prod.acquire_and_advance(), src_v, dst_v, cvt_tidx,
                                seqlen_k - n_min * self.tile_n)

    @cute.jit
    def _convert_stage(self, hs, hd, src, dst, cvt_tidx, rows_valid):
        """One block from staging stage ``hs`` into f16 stage ``hd`` (both acquired): convert,
        free the staging stage, publish the f16 stage (the fence makes the generic-proxy stores
        visible to wgmma)."""
        units = self.tile_n * self.head_dim // 16  # 16-byte units of one e4m3 stage
        self.path.convert_block(src, hs.index * units, dst, hd.index * 2 * units, cvt_tidx, rows_valid)
        hs.release()
        cute.arch.fence_view_async_shared()
        hd.commit()


__all__ = ["DequantConverter"]
