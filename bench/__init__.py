"""The bench suite: first-draft kernels in bench/kernels/, run through the optimizer and compared with
PyTorch eager and torch.compile (`python -m bench`, `cuda-agent bench`). Engine figures are in
bench/engine_bench.py."""
