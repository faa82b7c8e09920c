"""device: the accelerator a rank trains on: a real CUDA device or the emulated one with its
modelled step time and memory (devices), the emulated device's cheap stand-in model (standin), the
models trained on a real GPU (gpumodels) and the CUDA memory probe of dynamic batching
(memprobe)."""
