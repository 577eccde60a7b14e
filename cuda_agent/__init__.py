"""cuda-agent: verified, measured CUDA kernel rewrites, in the editor and on the command line."""

__version__ = "0.1.0"
