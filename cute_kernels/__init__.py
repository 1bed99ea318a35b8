"""CuTe DSL kernels for SM90 (Hopper) and their building blocks."""
