"""Real JAX workloads (flax.nnx + optax) for the demo, the tests and the benchmarks."""
