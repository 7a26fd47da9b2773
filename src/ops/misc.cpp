// Reference kernels: miscellaneous ops (Identity, Dropout in inference mode).
#include "ops/common.hpp"

namespace basalt {

void register_misc_ops(OpRegistry& r) {
  // Identity passes its input through without a copy (tensors are immutable once produced).
  r.add("Identity", 1, [](const Node&) {
    return kernel([](KernelContext& ctx) { ctx.set_output(0, ctx.input_value(0)); });
  });
}

}  // namespace basalt
