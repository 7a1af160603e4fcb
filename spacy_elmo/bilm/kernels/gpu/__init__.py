"""GPU kernels for the LSTM's time loop: the fused Triton step, and CUDA graphs that replay it."""
