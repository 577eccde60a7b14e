"""The language server: LSP features over the agent's engine. Knows LSP, not CUDA (see agent/ for that)."""
