#!/usr/bin/env python3
"""Fails when a loop g++ vectorises for AVX-512 stays scalar for AVX2.

The build has no -march flag: hot functions are compiled per instruction set
(DQT_TARGET_CLONES, kernels/vecmath.h) and picked at run time. A helper written so that only the
AVX-512 clone vectorises (g++ keeps -ftrapping-math, so below AVX-512 it will not vectorise a
loop with float comparisons) runs scalar on every AVX2 machine, and no test notices: the
results are the same bits, only slower. exp_f32 was such a helper until 2026-12-06 (SwiGLU 7x
slower on a Zen 3). This compiles each file that uses the clones for x86-64-v3 and x86-64-v4
and compares the loops g++ reports vectorised.

    python3 scripts/check_vector_loops.py
"""
import concurrent.futures
import os
import pathlib
import re
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parent.parent
# Loops that need AVX-512 to vectorise, by a piece of their source line, with why.
AVX512_ONLY = {
    "exact_term(": "int64 sums of doubles converted exactly: AVX2 has no 64-bit integer conversion",
}
VECTORISED = re.compile(r"^([^:]+):(\d+):\d+: optimized: loop vectorized")


def vectorised_loops(source, arch):
    with tempfile.TemporaryDirectory() as out:
        result = subprocess.run(
            ["g++", "-std=c++20", "-O3", "-DNDEBUG", "-DDQT_NO_TARGET_CLONES", "-fopenmp", f"-march={arch}",
             "-I", str(REPO / "src"), "-c", str(source), "-o", f"{out}/x.o", "-fopt-info-vec-optimized"],
            capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"check_vector_loops: {source} does not compile for {arch}:\n{result.stderr[-2000:]}")
    return {(m.group(1), int(m.group(2))) for m in map(VECTORISED.match, result.stderr.splitlines()) if m}


def main():
    sources = sorted(p for p in (REPO / "src").rglob("*.cpp")
                     if re.search(r"DQT_TARGET_CLONES|kernels/vecmath\.h", p.read_text()))
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count()) as pool:
        avx512 = pool.map(lambda source: vectorised_loops(source, "x86-64-v4"), sources)
        avx2 = pool.map(lambda source: vectorised_loops(source, "x86-64-v3"), sources)
        missing = set().union(*(v4 - v3 for v4, v3 in zip(avx512, avx2)))
    scalar_on_avx2 = []
    for file, line in sorted(missing):
        text = pathlib.Path(file).read_text().splitlines()[line - 1]
        if not any(piece in text for piece in AVX512_ONLY):
            scalar_on_avx2.append(f"{os.path.relpath(file, REPO)}:{line}: {text.strip()}")
    print(f"check_vector_loops: {len(sources)} files compiled for x86-64-v3 and x86-64-v4")
    if scalar_on_avx2:
        print("loops vectorised for AVX-512 but scalar for AVX2 (write the helper without float compares"
              " or selects under &&, as kernels/vecmath.h does):", *scalar_on_avx2, sep="\n  ")
        sys.exit(1)


if __name__ == "__main__":
    main()
