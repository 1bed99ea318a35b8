"""The definition of the op (`reference`: float64/float32 PyTorch) and bit-level models of the
FP8 kernels' arithmetic (`emulation`). Test oracles and A/B designs, not GPU paths."""
