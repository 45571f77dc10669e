#!/usr/bin/env python3
"""Counts the lines a newcomer reads to follow one fp32 single-process training step, from the
trainer's step to the weight update: the bodies of the functions on the path (from the line
that starts each definition to its closing brace) plus the headers that declare the types and
functions they use. Lists what it counted.

    python3 scripts/step_path_lines.py                  the path of the checkout
    python3 scripts/step_path_lines.py --at 4f5fb06     the path as it ran at that commit

The path is written out below, per version of the code (it changes as the code does): the
reading guide of docs/ARCHITECTURE.md in terms of definitions. Kernels (gemm, rmsnorm, rope,
attention, ...) are below the path: a reader of the step takes them as given.
"""
import argparse
import pathlib
import re
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent

# The step's functions common to every version: (file, the text a definition starts with).
TRAINING_PASSES = [
    ("src/model/llama.cpp", "double model_forward("),
    ("src/model/llama.cpp", "class BackwardPass {"),
    ("src/model/llama.cpp", "void model_backward("),
]
FORWARD_BACKWARD = [
    ("src/train/trainer.cpp", "    StepOutcome run_step("),
    ("src/optim/schedule.cpp", "float LrSchedule::at("),
    ("src/train/training_step.cpp", "TrainingStep::Result TrainingStep::run("),
    ("src/data/batch.cpp", "void sample_sequences("),
    ("src/model/weight_access.cpp", "DenseWeight::DenseWeight(const ModelParameters& model, const ParamTensor& tensor, int"),
    ("src/model/weight_access.cpp", "LinearInput::LinearInput("),
    ("src/model/weight_access.cpp", "int read_slice_rows("),
    ("src/model/weight_access.cpp", "void weight_linear_forward("),
    ("src/model/weight_access.cpp", "class BackwardOperand {"),
    ("src/model/weight_access.cpp", "void weight_linear_backward_input("),
    ("src/model/weight_access.cpp", "void weight_linear_backward_weight("),
    ("src/model/weight_access.cpp", "void weight_embedding_forward("),
    ("src/model/gradient_sink.cpp", "std::vector<double> chunk_sums_of_squares("),
    ("src/model/gradient_sink.cpp", "double sum_in_order("),
    ("src/optim/optimizer.cpp", "TensorUpdate::TensorUpdate("),
    ("src/optim/optimizer.cpp", "void TensorUpdate::apply("),
    ("src/optim/optimizer.cpp", "void TensorUpdate::finish("),
    ("src/optim/optimizer.cpp", "void optimizer_step_range("),
    ("src/optim/adamw.cpp", "AdamBias::AdamBias("),
    ("src/optim/adamw.cpp", "AdamWStep::AdamWStep("),
    ("src/optim/adamw.cpp", "void AdamWStep::apply("),
]
COMMON_HEADERS = [
    "src/model/parameters.h", "src/model/llama.h", "src/model/weight_access.h", "src/model/gradient_sink.h",
    "src/train/training_step.h", "src/optim/optimizer.h", "src/optim/adamw.h", "src/optim/schedule.h",
    "src/data/batch.h", "src/optim/optimizer_state.h",
]
PATHS = {
    # Before the accumulator left the transport: a one-process step ran the data-parallel
    # exchange and the communicator's collectives on a group of one.
    "4f5fb06": {
        "functions": FORWARD_BACKWARD + TRAINING_PASSES + [
            ("src/model/gradient_sink.cpp", "int gradient_piece_rows("),
            ("src/optim/fused_update.cpp", "float clip_factor("),
            ("src/train/training_step.cpp", "TrainingStep::Result TrainingStep::run_unfused("),
            ("src/data_parallel/gradient_exchange.cpp", "void add_into("),
            ("src/data_parallel/gradient_exchange.cpp", "GradientExchange::GradientExchange("),
            ("src/data_parallel/gradient_exchange.cpp", "int GradientExchange::piece_index("),
            ("src/data_parallel/gradient_exchange.cpp", "void GradientExchange::begin_leaf("),
            ("src/data_parallel/gradient_exchange.cpp", "float* GradientExchange::acquire("),
            ("src/data_parallel/gradient_exchange.cpp", "void GradientExchange::release("),
            ("src/data_parallel/gradient_exchange.cpp", "void GradientExchange::exchange_final_piece("),
            ("src/data_parallel/gradient_exchange.cpp", "float* GradientExchange::reduce("),
            ("src/data_parallel/gradient_exchange.cpp", "double GradientExchange::global_norm("),
            ("src/data_parallel/gradient_exchange.cpp", "void GradientExchange::scale("),
            ("src/data_parallel/comm.cpp", "std::vector<double> Communicator::allgather("),
            ("src/data_parallel/comm.cpp", "void Communicator::allgather_in_place("),
            ("src/data_parallel/comm.cpp", "void Communicator::progress("),
            ("src/data_parallel/comm.cpp", "void Communicator::wait_all("),
            ("src/data_parallel/comm.cpp", "void Communicator::reset_counters("),
        ],
        "headers": COMMON_HEADERS + [
            "src/data_parallel/gradient_exchange.h", "src/data_parallel/pairwise_sum.h", "src/data_parallel/comm.h",
            "src/data_parallel/shard_plan.h",
        ],
    },
    # The block written once (model/decoder_block.h), walked by the training passes; the
    # data-parallel half of the step in a class of its own (train/data_parallel_step.h), which
    # one process does not build.
    "current": {
        "functions": FORWARD_BACKWARD + TRAINING_PASSES + [
            ("src/optim/optimizer.cpp", "float clip_factor("),
            ("src/optim/optimizer.cpp", "void clip_gradients("),
            ("src/model/llama.cpp", "class TrainingLayer {"),
            ("src/model/decoder_block.cpp", "bool on_residual_stream("),
            ("src/model/decoder_block.cpp", "int block_value_cols("),
            ("src/model/decoder_block.cpp", "std::vector<BlockStep> decoder_block_steps("),
            ("src/train/training_step.cpp", "TrainingStep::Result TrainingStep::run_unfused("),
            ("src/model/gradient_accumulator.cpp", "void add_into("),
            ("src/model/gradient_accumulator.cpp", "GradientAccumulator::GradientAccumulator("),
            ("src/model/gradient_accumulator.cpp", "int GradientAccumulator::piece_index("),
            ("src/model/gradient_accumulator.cpp", "void GradientAccumulator::begin_leaf("),
            ("src/model/gradient_accumulator.cpp", "float* GradientAccumulator::acquire("),
            ("src/model/gradient_accumulator.cpp", "void GradientAccumulator::release("),
            ("src/model/gradient_accumulator.cpp", "void GradientAccumulator::check_complete("),
            ("src/model/gradient_accumulator.cpp", "void GradientAccumulator::fold("),
            ("src/model/gradient_sink.cpp", "double sum_of_squares("),
        ],
        "headers": COMMON_HEADERS + ["src/model/gradient_accumulator.h", "src/core/pairwise_sum.h",
                                     "src/model/decoder_block.h"],
    },
}


def read(path, at):
    """The file at `path` (from the repository's root, wherever the script runs from)."""
    if at is None:
        with open(REPO / path) as f:
            return f.read()
    return subprocess.run(["git", "-C", str(REPO), "show", f"{at}:{path}"], capture_output=True, text=True,
                          check=True).stdout


def definition_lines(text, start, where):
    """Lines from the one that begins with `start` to the brace that closes its body."""
    lines = text.split("\n")
    for first, line in enumerate(lines):
        if line.startswith(start):
            break
    else:
        sys.exit(f"step_path_lines: no definition starting {start!r} in {where}")
    depth, opened = 0, False
    for last in range(first, len(lines)):
        code = re.sub(r'"(\\.|[^"\\])*"|//.*', "", lines[last])  # strings and comments hold no braces
        depth += code.count("{") - code.count("}")
        opened = opened or "{" in code
        if opened and depth == 0:
            return last - first + 1
    sys.exit(f"step_path_lines: unbalanced braces after {start!r} in {where}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--at", help="count the path of this commit (one named in PATHS)")
    args = parser.parse_args()
    version = args.at or "current"
    if version not in PATHS:
        sys.exit(f"step_path_lines: no path written for {version} (known: {', '.join(PATHS)})")
    path = PATHS[version]
    total = 0
    print(f"| file | definition | lines |\n|---|---|---|")
    for file, start in path["functions"]:
        count = definition_lines(read(file, args.at), start, file)
        total += count
        print(f"| {file} | `{start.strip().rstrip('{').strip()}` | {count} |")
    for header in path["headers"]:
        count = len(read(header, args.at).split("\n")) - 1
        total += count
        print(f"| {header} | (whole header) | {count} |")
    functions, headers = len(path["functions"]), len(path["headers"])
    print(f"\n{functions} definitions and {headers} headers: {total} lines ({version})")


if __name__ == "__main__":
    main()
