from cuda_agent.cli import main

# Guarded: the GPU worker is started with "spawn", which imports the parent's __main__ again.
if __name__ == "__main__":
    raise SystemExit(main())
