// Shared helpers for the kernel unit tests: build attributes, run one kernel on given inputs.
//
//   using namespace basalt::test;
//   auto y = run_op("Gather", 13, {data, indices}, {attr("axis", 1)})[0].tensor;
//   auto outs = run_op("TopK", 11, {x, k}, {attr("largest", 0)}, 2);
//   run_op("Resize", 13, {x, Value(), scales}, {attr("mode", "nearest")});  // Value() = omitted input
//   run_op("LabelEncoder", 4, {x}, {attr("keys_strings", Strings{"a", "b"})}, 1, "ai.onnx.ml");
//
// run_op builds a one-node invocation the way the executor would (no graph, no session): the
// node is named "t", input i has value id i (-1 when omitted), and every output is requested.
#pragma once

#include "ops/kernel.hpp"
#include "core/thread_pool.hpp"

#include <basalt/error.hpp>
#include <basalt/tensor.hpp>

#include <concepts>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace basalt::test {

// Element lists for list attributes: attr("axes", Ints{0, 2}). (A bare braced list would be
// ambiguous between the list overloads.)
using Ints = std::vector<int64_t>;
using Floats = std::vector<float>;
using Strings = std::vector<std::string>;

// Attribute makers. The value's C++ type picks the attribute type: any integer -> Int,
// float/double -> Float (write 0.0f, not 0), string -> String, Tensor -> Tensor, and
// Ints / Floats / Strings -> the list types.
namespace detail {
template <class Field, class V>
Attribute make_attr(const std::string& name, Attribute::Type type, Field Attribute::*field, V&& v) {
  Attribute a;
  a.name = name;
  a.type = type;
  a.*field = std::forward<V>(v);
  return a;
}
}  // namespace detail

template <std::integral I>
Attribute attr(const std::string& name, I v) {
  return detail::make_attr(name, Attribute::Type::Int, &Attribute::i, int64_t(v));
}
inline Attribute attr(const std::string& name, float v) {
  return detail::make_attr(name, Attribute::Type::Float, &Attribute::f, v);
}
inline Attribute attr(const std::string& name, std::string v) {
  return detail::make_attr(name, Attribute::Type::String, &Attribute::s, std::move(v));
}
inline Attribute attr(const std::string& name, const char* v) { return attr(name, std::string(v)); }
inline Attribute attr(const std::string& name, Tensor v) {
  return detail::make_attr(name, Attribute::Type::Tensor, &Attribute::t, std::move(v));
}
inline Attribute attr(const std::string& name, Ints v) {
  return detail::make_attr(name, Attribute::Type::Ints, &Attribute::ints, std::move(v));
}
inline Attribute attr(const std::string& name, Floats v) {
  return detail::make_attr(name, Attribute::Type::Floats, &Attribute::floats, std::move(v));
}
inline Attribute attr(const std::string& name, Strings v) {
  return detail::make_attr(name, Attribute::Type::Strings, &Attribute::strings, std::move(v));
}

// Runs kernel (domain, op, opset) on `inputs` and returns its `num_outputs` outputs. A None
// Value() among the inputs is an omitted optional input. Errors from the kernel's factory
// (attribute validation) and from compute() propagate; a missing kernel is Unsupported.
// threads > 1: the kernel runs on a pool of that many threads (spinning off).
// The node the op tests run: input i is value i (-1 for a None Value), outputs are 100 + k.
inline Node test_node(const std::string& domain, const std::string& op, int opset, const std::vector<Value>& inputs,
                      std::vector<Attribute> attrs, int num_outputs) {
  Node n;
  n.name = "t";
  n.op_type = op;
  n.domain = domain;
  n.opset = opset;
  n.attrs = std::move(attrs);
  for (size_t i = 0; i < inputs.size(); ++i) n.inputs.push_back(inputs[i].is_none() ? -1 : int(i));
  for (int i = 0; i < num_outputs; ++i) n.outputs.push_back(100 + i);
  return n;
}

// Runs the kernel already attached to n (test_node) on `inputs` (a None Value = omitted), on a
// pool of `threads` threads (spinning off) when more than 1; returns its num_outputs outputs.
inline std::vector<Value> compute_node(const Node& n, const std::vector<Value>& inputs, int num_outputs, int threads = 1) {
  std::vector<const Value*> ins;
  for (auto& v : inputs) ins.push_back(v.is_none() ? nullptr : &v);
  std::vector<Value> outs(static_cast<size_t>(num_outputs));
  std::unique_ptr<ThreadPool> pool = threads > 1 ? std::make_unique<ThreadPool>(threads, 0) : nullptr;
  RunContext rc;
  rc.threads = threads;
  rc.pool = pool.get();
  KernelContext ctx(n, ins, outs, {}, rc);
  n.kernel->compute(ctx);
  return outs;
}

inline std::vector<Value> run_op(const std::string& op, int opset, std::vector<Value> inputs,
                                 std::vector<Attribute> attrs = {}, int num_outputs = 1,
                                 const std::string& domain = "", int threads = 1) {
  Node n = test_node(domain, op, opset, inputs, std::move(attrs), num_outputs);
  const KernelFactory* f = OpRegistry::instance().find(domain, op, opset);
  if (!f) throw Error(ErrorCode::Unsupported, "no kernel for " + op);
  n.kernel = (*f)(n);
  return compute_node(n, inputs, num_outputs, threads);
}

// A tensor of the given shape holding `values` in row-major order.
template <class T>
Tensor make_tensor(Shape shape, std::vector<T> values) {
  return Tensor::from_vector<T>(values, std::move(shape));
}

}  // namespace basalt::test
