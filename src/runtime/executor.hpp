// Runs a graph: one frame of values per execution, nodes in order, values freed after their
// last use. No shared mutable state: any number of threads may execute the same graph.
#pragma once

#include "graph/graph.hpp"
#include "ops/kernel.hpp"

#include <span>
#include <vector>

namespace basalt {

// inputs: one value per g.inputs entry (a None value for an input with an initializer default
// means "use the default"); captures: one per g.captures entry. Returns g.outputs' values.
std::vector<Value> execute_graph(const Graph& g, std::span<const Value> inputs, std::span<const Value> captures,
                                 RunContext& rc);

}  // namespace basalt
