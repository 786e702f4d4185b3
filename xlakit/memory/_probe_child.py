"""Child process of an isolated probe: load a serialized executable, run it (a warm-up run, then the
measured one), write the numbers.

Usage: ``python -m xlakit.memory._probe_child JOB.pkl RESULT.json`` where the job is a pickle written by
:func:`xlakit.memory.probe.probe` (this process trusts it: its parent wrote it to a private 0600 file). The
result is one JSON object (:func:`xlakit.memory.probe.measure_runs`'s numbers) written to ``RESULT.json``
with an atomic rename, never to stdout: whatever else runs in this process (a ``sitecustomize``, an atexit
hook, a library's message) may print, and none of it can be taken for the result.

Nothing is compiled here: the executable is deserialized and loaded, so no compile-time scratch reaches the
peak. The arguments are created here (numpy zeros of the recorded shapes and dtypes, placed with
``device_put``: nothing compiles, so no compile leaves freed heap behind for the run to reuse) before the peak
is reset.
"""

from __future__ import annotations

import json
import os
import pickle
import sys


def main(path: str, result_path: str) -> int:
    with open(path, "rb") as fh:
        job = pickle.load(fh)  # noqa: S301 - written by our parent process, see module docstring

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import serialize_executable

    from xlakit._jax.kernels import make_ready
    from xlakit.memory.probe import measure_runs

    device = next(d for d in jax.devices(job["platform"]) if d.id == job["device_id"])
    loaded = serialize_executable.deserialize_and_load(job["payload"], job["in_tree"], job["out_tree"],
                                                       backend=job["platform"], execution_devices=[device])
    # Nothing is lowered here, so kernels that jaxlib fills in at lowering (CPU LAPACK) must be made ready
    # before the first run, or a linalg program calls a null pointer (raises KernelsNotReady otherwise).
    make_ready(loaded.runtime_executable(), job["platform"])
    def make_run():  # fresh arguments for each run: a donated one is consumed by the run
        flat = [jax.device_put(np.zeros(shape, jnp.dtype(dtype)), device) for shape, dtype in job["specs"]]
        args, kwargs = jax.tree.unflatten(job["in_tree"], flat)
        jax.block_until_ready(flat)
        return lambda: loaded(*args, **kwargs)

    result = measure_runs(make_run, [device], bool(job.get("warmup", True)))
    tmp = f"{result_path}.{os.getpid()}.tmp"
    with open(tmp, "w") as out:
        json.dump(result, out)
    os.replace(tmp, result_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
