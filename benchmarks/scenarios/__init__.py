"""The scenarios, one module each; ``run(quick=..., progress=..., workdir=...)`` -> result."""
