#pragma once
// The fixed summation order of a step's gradient. A step's global batch is M micro-batches
// ("leaves"), each with its gradient computed from zero; the step's gradient is their
// pairwise sum, a tree that depends on M alone:
//   leaves are pushed in order onto a stack of blocks; the top two blocks merge (lower +=
//   upper) while they have the same size and their union is aligned (starts at a multiple of
//   its size); at the end the stack folds from the top down.
// A data-parallel rank holding leaves [a, b) pushes only those: it is left with the maximal
// aligned blocks of [a, b), each a finished subtree of the same tree. The owner of a shard
// pushes every rank's blocks in leaf order and folds: the same additions in the same order,
// so the sum has the same bits for any number of ranks (float addition is commutative, so
// only the grouping matters).
#include <vector>

namespace dqt {

// Leaves [first, first + size).
struct LeafBlock {
    int first = 0;
    int size = 1;
};

class PairwiseSum {
public:
    // Pushes `block` (the next leaves in order) and merges; merge(lower, upper) gets the stack
    // positions of each merge, lower += upper, upper is then dropped.
    template <typename Merge>
    void push(LeafBlock block, Merge&& merge) {
        stack_.push_back(block);
        while (stack_.size() >= 2) {
            const LeafBlock upper = stack_.back(), lower = stack_[stack_.size() - 2];
            const int merged = lower.size + upper.size;
            if (lower.size != upper.size || lower.first % merged != 0) break;
            merge(static_cast<int>(stack_.size()) - 2, static_cast<int>(stack_.size()) - 1);
            stack_.pop_back();
            stack_.back().size = merged;
        }
    }
    // Folds the stack into position 0, from the top down.
    template <typename Merge>
    void fold(Merge&& merge) {
        while (stack_.size() >= 2) {
            merge(static_cast<int>(stack_.size()) - 2, static_cast<int>(stack_.size()) - 1);
            stack_[stack_.size() - 2].size += stack_.back().size;
            stack_.pop_back();
        }
    }
    const std::vector<LeafBlock>& blocks() const { return stack_; }

private:
    std::vector<LeafBlock> stack_;
};

// The blocks that leaves [begin, end) pushed one by one leave on the stack.
inline std::vector<LeafBlock> aligned_blocks(int begin, int end) {
    PairwiseSum sum;
    for (int leaf = begin; leaf < end; ++leaf) sum.push({leaf, 1}, [](int, int) {});
    return sum.blocks();
}

}  // namespace dqt
