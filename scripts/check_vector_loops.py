#!/usr/bin/env python3
"""Fails when a loop g++ vectorises for AVX-512 stays scalar for AVX2.

The build has no -march flag: hot functions are compiled per instruction set
(DQT_TARGET_CLONES, kernels/vecmath.h) and picked at run time. A helper written so that only the
AVX-512 clone vectorises (g++ keeps -ftrapping-math, so below AVX-512 it will not vectorise a
loop with float comparisons) runs scalar on every AVX2 machine, and no test notices: the
results are the same bits, only slower. exp_f32 was such a helper until 2026-12-06 (SwiGLU 7x
slower on a Zen 3). This compiles each file that uses the clones for x86-64-v3 and x86-64-v4,
with the options CMakeLists.txt gives that file, and compares the loops g++ reports vectorised.
It also fails when one of the loops named in MUST_VECTORISE is scalar for either: a branch in
their element functions (an errno check, an early return) would make them so on every machine.

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
# Loops that must vectorise for both, by file and a piece of their source line: the optimizer
# updates' element loops (a whole pass over the model's weights and moments each step).
MUST_VECTORISE = {
    ("src/optim/dqt_update.cpp", "dqt_update_element_as<Stochastic, WithResidual>("),
    ("src/optim/adamw.cpp", "adamw_element("),
}
VECTORISED = re.compile(r"^([^:]+):(\d+):\d+: optimized: loop vectorized")
SCALAR = re.compile(r"^([^:]+):(\d+):\d+: missed: couldn't vectorize loop")
FILE_OPTIONS = re.compile(r"set_source_files_properties\(([^)]*?)\bPROPERTIES\s+COMPILE_OPTIONS\s+([^)]*)\)")


def options_by_file():
    """The per-file compile options of CMakeLists.txt's set_source_files_properties calls."""
    options = {}
    for files, values in FILE_OPTIONS.findall((REPO / "CMakeLists.txt").read_text()):
        for file in files.split():
            options[file] = values.strip().strip('"').split(";")
    return options


def vectorised_loops(source, arch, extra_options):
    """The loops g++ vectorised and the loops it left scalar, as (file, line of the `for`) sets."""
    with tempfile.TemporaryDirectory() as out:
        result = subprocess.run(
            ["g++", "-std=c++20", "-O3", "-DNDEBUG", "-DDQT_NO_TARGET_CLONES", "-fopenmp", f"-march={arch}",
             *extra_options, "-I", str(REPO / "src"), "-c", str(source), "-o", f"{out}/x.o",
             "-fopt-info-vec-optimized-missed"],
            capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"check_vector_loops: {source} does not compile for {arch}:\n{result.stderr[-2000:]}")
    def loops(pattern):
        return {(m.group(1), int(m.group(2))) for m in map(pattern.match, result.stderr.splitlines()) if m}
    return loops(VECTORISED), loops(SCALAR)


def line_of(file, piece):
    lines = (REPO / file).read_text().splitlines()
    found = [number for number, text in enumerate(lines, 1) if piece in text]
    if len(found) != 1:
        sys.exit(f"check_vector_loops: {file} has {len(found)} lines with {piece!r}, not one: update MUST_VECTORISE")
    return found[0]


def main():
    sources = sorted(p for p in (REPO / "src").rglob("*.cpp")
                     if re.search(r"DQT_TARGET_CLONES|kernels/vecmath\.h", p.read_text()))
    sources += sorted({REPO / file for file, _ in MUST_VECTORISE} - set(sources))
    options = options_by_file()
    def compile_for(arch):
        return lambda source: vectorised_loops(source, arch, options.get(str(source.relative_to(REPO)), []))
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count()) as pool:
        avx512 = list(pool.map(compile_for("x86-64-v4"), sources))
        avx2 = list(pool.map(compile_for("x86-64-v3"), sources))
    missing = set().union(*(v4[0] - v3[0] for v4, v3 in zip(avx512, avx2)))
    scalar_on_avx2 = []
    for file, line in sorted(missing):
        text = pathlib.Path(file).read_text().splitlines()[line - 1]
        if not any(piece in text for piece in AVX512_ONLY):
            scalar_on_avx2.append(f"{os.path.relpath(file, REPO)}:{line}: {text.strip()}")
    scalar_everywhere = []
    for file, piece in sorted(MUST_VECTORISE):
        line = line_of(file, piece)
        # g++ reports a loop at its `for` line, up to three lines above the call. Every copy of
        # the loop (one per template instantiation) must vectorise: none reported scalar.
        for arch, loops in (("x86-64-v4", avx512), ("x86-64-v3", avx2)):
            vectorised, scalar = (
                {loop for loop in found if loop[0].endswith(file) and 0 <= line - loop[1] <= 3}
                for found in loops[sources.index(REPO / file)])
            if not vectorised or scalar:
                scalar_everywhere.append(f"{file}:{line} ({arch}): {piece}")
    print(f"check_vector_loops: {len(sources)} files compiled for x86-64-v3 and x86-64-v4")
    if scalar_on_avx2:
        print("loops vectorised for AVX-512 but scalar for AVX2 (write the helper without float compares"
              " or selects under &&, as kernels/vecmath.h does):", *scalar_on_avx2, sep="\n  ")
    if scalar_everywhere:
        print("loops that must vectorise but did not (a branch in the element function? -fopt-info-vec-missed"
              " says why):", *scalar_everywhere, sep="\n  ")
    if scalar_on_avx2 or scalar_everywhere:
        sys.exit(1)


if __name__ == "__main__":
    main()
