"""What explaining the peak costs next to compiling: ``xlakit.memory.peak()`` on the demo transformer train step.

Program: ``transformer_train_step`` of :mod:`xlakit.demo.workloads` (flax.nnx decoder-only transformer, 4
scanned layers, d_model 128, batch 8 x 64 tokens, optax adamw), CPU. One fresh process:

1. compile the train step (``jax.jit(step).lower(*args).compile()``), timed (wall, ``time.perf_counter``;
   CPU, ``time.process_time``, all threads);
2. ``peak(compiled)`` once cold (the first call in the process also imports pandas and decodes the protos'
   field tables) and then ``--repeat`` times warm, each timed; the warm median is the steady cost;
3. print both against the compile time (target: warm peak() <= 10 % of compile), plus the program's size
   (instructions, logical buffers) and the peak found.

Run: ``PYTHONPATH=. python benchmarks/memory_attribution.py [--repeat 5]``.
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="warm peak() calls to take the median of")
    ns = parser.parse_args()

    import jax

    from xlakit.demo.workloads import workloads
    from xlakit.memory import peak

    workload = next(w for w in workloads() if w.name == "transformer_train_step")
    fn, args = workload.build()
    lowered = fn.lower(*args)
    wall, cpu = time.perf_counter(), time.process_time()
    compiled = lowered.compile()
    compile_wall, compile_cpu = time.perf_counter() - wall, time.process_time() - cpu

    def timed():
        w, c = time.perf_counter(), time.process_time()
        result = peak(compiled)
        return result, time.perf_counter() - w, time.process_time() - c

    result, cold_wall, cold_cpu = timed()
    warm = [timed()[1:] for _ in range(ns.repeat)]
    warm_wall = statistics.median(w for w, _ in warm)
    warm_cpu = statistics.median(c for _, c in warm)
    module = result.attribution.assignment._module
    print(f"program: {workload.name} ({workload.description})")
    print(f"jax {jax.__version__}, {jax.devices()[0].platform}; {len(module.instructions)} HLO instructions, "
          f"{len(result.attribution.buffers)} logical buffers, {result.steps} program steps")
    print(f"{'':28}{'wall s':>10}{'CPU s':>10}{'wall % of compile':>20}{'CPU % of compile':>18}")
    print(f"{'compile':28}{compile_wall:10.3f}{compile_cpu:10.3f}{100.0:19.1f}%{100.0:17.1f}%")
    for label, w, c in (("peak() cold (first call)", cold_wall, cold_cpu),
                        (f"peak() warm (median of {ns.repeat})", warm_wall, warm_cpu)):
        print(f"{label:28}{w:10.3f}{c:10.3f}{100 * w / compile_wall:19.1f}%{100 * c / compile_cpu:17.1f}%")
    verdict = "meets" if warm_wall <= 0.10 * compile_wall else "MISSES"
    print(f"target warm peak() <= 10 % of compile: {verdict}")
    print(result)


if __name__ == "__main__":
    main()
