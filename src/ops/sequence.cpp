// Sequence and optional ops. A sequence is a Value holding a shared vector of tensors; ops
// that "modify" a sequence build a new vector (values are immutable once produced).
#include "ops/common.hpp"

#include <cstring>

namespace basalt {
namespace {

const std::vector<Tensor>& seq_of(const KernelContext& ctx, int i) {
  const Value& v = ctx.input_value(i);
  if (!v.is_sequence()) ctx.fail(ErrorCode::InvalidArgument, "input " + std::to_string(i) + " must be a sequence");
  return *v.sequence;
}

DType seq_type(const KernelContext& ctx, int i) {
  const Value& v = ctx.input_value(i);
  if (v.seq_elem_type != DType::Undefined) return v.seq_elem_type;
  return v.sequence->empty() ? DType::Undefined : (*v.sequence)[0].dtype();
}

int64_t position(const KernelContext& ctx, int input, int64_t size, bool insert) {
  const Tensor& p = ctx.input(input);
  if (p.numel() != 1) ctx.fail(ErrorCode::InvalidArgument, "position must be a scalar");
  int64_t pos = p.get_int(0);
  int64_t lo = -size, hi = insert ? size : size - 1;
  if (pos < lo || pos > hi)
    ctx.fail(ErrorCode::InvalidArgument, "position " + std::to_string(pos) + " is out of range for a sequence of length " +
                                             std::to_string(size));
  return pos < 0 ? pos + size : pos;
}

// Concatenate (or stack, new_axis) tensors along axis.
Tensor concat(const KernelContext& ctx, const std::vector<Tensor>& items, int64_t axis_attr, bool new_axis) {
  if (items.empty()) ctx.fail(ErrorCode::InvalidArgument, "cannot concatenate an empty sequence");
  std::vector<Tensor> parts;
  for (auto& t : items) {
    if (new_axis) {
      Shape s = t.shape();
      int ax = normalize_axis(ctx, axis_attr, t.rank() + 1);
      s.insert(s.begin() + ax, 1);
      parts.push_back(t.reshaped(s));
    } else {
      parts.push_back(t);
    }
  }
  int rank = parts[0].rank();
  int axis = normalize_axis(ctx, axis_attr, rank);
  Shape out = parts[0].shape();
  out[size_t(axis)] = 0;
  for (auto& t : parts) {
    if (t.rank() != rank || t.dtype() != parts[0].dtype()) ctx.fail(ErrorCode::InvalidArgument, "sequence items differ in rank or type");
    for (int d = 0; d < rank; ++d)
      if (d != axis && t.shape()[size_t(d)] != parts[0].shape()[size_t(d)])
        ctx.fail(ErrorCode::InvalidArgument, "sequence items have mismatched shapes " + shape_str(t.shape()) + " and " +
                                                 shape_str(parts[0].shape()));
    out[size_t(axis)] += t.shape()[size_t(axis)];
  }
  Tensor r(parts[0].dtype(), out);
  int64_t outer = 1;
  for (int d = 0; d < axis; ++d) outer *= out[size_t(d)];
  int64_t inner_out = shape_numel(out) / std::max<int64_t>(outer, 1);
  size_t es = dtype_size(r.dtype());
  int64_t off = 0;
  for (auto& t : parts) {
    int64_t inner = outer ? t.numel() / outer : 0;
    for (int64_t o = 0; o < outer; ++o) {
      if (r.dtype() == DType::String) {
        for (int64_t k = 0; k < inner; ++k) r.data<std::string>()[o * inner_out + off + k] = t.data<std::string>()[o * inner + k];
      } else {
        std::memcpy(static_cast<char*>(r.raw()) + size_t(o * inner_out + off) * es,
                    static_cast<const char*>(t.raw()) + size_t(o * inner) * es, size_t(inner) * es);
      }
    }
    off += inner;
  }
  return r;
}

Tensor slice_axis(const Tensor& t, int axis, int64_t start, int64_t len) {
  Shape s = t.shape();
  int64_t n = s[size_t(axis)];
  s[size_t(axis)] = len;
  Tensor r(t.dtype(), s);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= t.shape()[size_t(d)];
  for (size_t d = size_t(axis) + 1; d < t.shape().size(); ++d) inner *= t.shape()[d];
  size_t es = dtype_size(t.dtype());
  for (int64_t o = 0; o < outer; ++o) {
    int64_t src = (o * n + start) * inner, dst = o * len * inner;
    if (t.dtype() == DType::String) {
      for (int64_t k = 0; k < len * inner; ++k) r.data<std::string>()[dst + k] = t.data<std::string>()[src + k];
    } else {
      std::memcpy(static_cast<char*>(r.raw()) + size_t(dst) * es, static_cast<const char*>(t.raw()) + size_t(src) * es,
                  size_t(len * inner) * es);
    }
  }
  return r;
}

}  // namespace

void register_sequence_ops(OpRegistry& r) {
  r.add("SequenceEmpty", 11, [](const Node& n) {
    int64_t v = n.attr_int("dtype", int64_t(DType::Float));
    if (v < 0 || !dtype_attr_known(v))
      n.fail(ErrorCode::InvalidModel, "attribute 'dtype' = " + std::to_string(v) + " is not a known data type");
    DType dt = DType(int32_t(v));
    return kernel([dt](KernelContext& ctx) { ctx.set_output(0, Value::make_sequence({}, dt)); });
  });
  r.add("SequenceConstruct", 11, [](const Node&) {
    return kernel([](KernelContext& ctx) {
      std::vector<Tensor> items;
      for (int i = 0; i < ctx.num_inputs(); ++i) {
        items.push_back(ctx.input(i));
        if (items.back().dtype() != items[0].dtype()) ctx.fail(ErrorCode::InvalidArgument, "sequence items must have one type");
      }
      DType dt = items.empty() ? DType::Undefined : items[0].dtype();
      ctx.set_output(0, Value::make_sequence(std::move(items), dt));
    });
  });
  r.add("SequenceInsert", 11, [](const Node&) {
    return kernel([](KernelContext& ctx) {
      std::vector<Tensor> items = seq_of(ctx, 0);
      const Tensor& t = ctx.input(1);
      DType dt = seq_type(ctx, 0);
      if (dt != DType::Undefined && t.dtype() != dt)
        ctx.fail(ErrorCode::InvalidArgument, std::string("cannot insert a ") + dtype_name(t.dtype()) + " tensor into a sequence of " + dtype_name(dt));
      int64_t pos = ctx.has_input(2) ? position(ctx, 2, int64_t(items.size()), true) : int64_t(items.size());
      items.insert(items.begin() + pos, t);
      ctx.set_output(0, Value::make_sequence(std::move(items), t.dtype()));
    });
  });
  r.add("SequenceAt", 11, [](const Node&) {
    return kernel([](KernelContext& ctx) {
      const auto& items = seq_of(ctx, 0);
      int64_t pos = position(ctx, 1, int64_t(items.size()), false);
      ctx.set_output(0, Value(items[size_t(pos)]));
    });
  });
  r.add("SequenceErase", 11, [](const Node&) {
    return kernel([](KernelContext& ctx) {
      std::vector<Tensor> items = seq_of(ctx, 0);
      if (items.empty()) ctx.fail(ErrorCode::InvalidArgument, "cannot erase from an empty sequence");
      int64_t pos = ctx.has_input(1) ? position(ctx, 1, int64_t(items.size()), false) : int64_t(items.size()) - 1;
      items.erase(items.begin() + pos);
      ctx.set_output(0, Value::make_sequence(std::move(items), seq_type(ctx, 0)));
    });
  });
  r.add("SequenceLength", 11, [](const Node&) {
    return kernel([](KernelContext& ctx) {
      ctx.set_output(0, Value(Tensor::scalar<int64_t>(int64_t(seq_of(ctx, 0).size()))));
    });
  });
  r.add("ConcatFromSequence", 11, [](const Node& n) {
    int64_t axis = n.attr_int("axis");
    bool new_axis = n.attr_int("new_axis", 0) != 0;
    return kernel([axis, new_axis](KernelContext& ctx) { ctx.set_output(0, Value(concat(ctx, seq_of(ctx, 0), axis, new_axis))); });
  });
  r.add("SplitToSequence", 11, [](const Node& n) {
    int64_t axis_attr = n.attr_int("axis", 0);
    bool keepdims = n.attr_int("keepdims", 1) != 0;
    return kernel([axis_attr, keepdims](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      int axis = normalize_axis(ctx, axis_attr, x.rank());
      int64_t dim = x.shape()[size_t(axis)];
      std::vector<int64_t> sizes;
      bool squeeze = false;
      if (!ctx.has_input(1)) {
        sizes.assign(size_t(dim), 1);
        squeeze = !keepdims;
      } else {
        const Tensor& s = ctx.input(1);
        if (s.rank() == 0) {
          int64_t c = s.get_int(0);
          if (c <= 0) ctx.fail(ErrorCode::InvalidArgument, "split size must be positive");
          for (int64_t o = 0; o < dim; o += c) sizes.push_back(std::min(c, dim - o));
        } else {
          sizes = s.to_int64_vector();
          int64_t sum = 0;
          for (auto v : sizes) {
            if (v < 0) ctx.fail(ErrorCode::InvalidArgument, "negative split size");
            sum += v;
          }
          if (sum != dim) ctx.fail(ErrorCode::InvalidArgument, "split sizes sum to " + std::to_string(sum) + ", axis has " + std::to_string(dim));
        }
      }
      std::vector<Tensor> items;
      int64_t off = 0;
      for (int64_t len : sizes) {
        Tensor t = slice_axis(x, axis, off, len);
        if (squeeze) {
          Shape s = t.shape();
          s.erase(s.begin() + axis);
          t = t.reshaped(s);
        }
        items.push_back(std::move(t));
        off += len;
      }
      ctx.set_output(0, Value::make_sequence(std::move(items), x.dtype()));
    });
  });
  r.add("SequenceMap", 17, [](const Node& n) {
    auto body = n.attr_graph("body");
    if (body->inputs.size() != n.inputs.size())
      n.fail(ErrorCode::InvalidModel, "body must have one input per node input");
    if (body->outputs.size() != n.outputs.size())
      n.fail(ErrorCode::InvalidModel, "body must have one output per node output");
    return kernel([body](KernelContext& ctx) {
      size_t len = seq_of(ctx, 0).size();
      for (int i = 1; i < ctx.num_inputs(); ++i)
        if (ctx.input_value(i).is_sequence() && ctx.input_value(i).sequence->size() != len)
          ctx.fail(ErrorCode::InvalidArgument, "all sequence inputs must have the same length");
      std::vector<std::vector<Tensor>> outs(size_t(ctx.num_outputs()));
      std::vector<Value> ins(size_t(ctx.num_inputs()));
      for (size_t k = 0; k < len; ++k) {
        for (int i = 0; i < ctx.num_inputs(); ++i) {
          const Value& v = ctx.input_value(i);
          ins[size_t(i)] = v.is_sequence() ? Value((*v.sequence)[k]) : v;
        }
        auto res = ctx.run_subgraph(*body, ins);
        for (size_t o = 0; o < res.size(); ++o) {
          if (!res[o].is_tensor()) ctx.fail(ErrorCode::Unsupported, "SequenceMap body outputs must be tensors");
          outs[o].push_back(res[o].tensor);
        }
      }
      for (size_t o = 0; o < outs.size(); ++o) {
        DType dt = outs[o].empty() ? body->values[size_t(body->outputs[o])].type.elem : outs[o][0].dtype();
        ctx.set_output(int(o), Value::make_sequence(std::move(outs[o]), dt));
      }
    });
  });
  // Optional values: an empty optional is a None Value.
  r.add("Optional", 15, [](const Node&) {
    return kernel([](KernelContext& ctx) { ctx.set_output(0, ctx.has_input(0) ? ctx.input_value(0) : Value()); });
  });
  r.add("OptionalHasElement", 15, [](const Node&) {
    return kernel([](KernelContext& ctx) { ctx.set_output(0, Value(Tensor::scalar<bool>(ctx.has_input(0)))); });
  });
  r.add("OptionalGetElement", 15, [](const Node&) {
    return kernel([](KernelContext& ctx) {
      if (!ctx.has_input(0)) ctx.fail(ErrorCode::InvalidArgument, "the optional input is empty");
      ctx.set_output(0, ctx.input_value(0));
    });
  });
  // What the planner and the optimizer know of these ops (ops/op_traits.hpp).
  for (const char* op : {"ConcatFromSequence", "Optional", "OptionalGetElement", "OptionalHasElement", "SequenceAt", "SequenceConstruct", "SequenceEmpty", "SequenceErase", "SequenceInsert", "SequenceLength", "SequenceMap", "SplitToSequence"}) r.def(op).data_dependent_shape().alias(Alias::HoldsInputs);
}

}  // namespace basalt
