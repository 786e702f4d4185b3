"""Code that talks to JAX and jaxlib: environment partition, version checks, hooks."""
