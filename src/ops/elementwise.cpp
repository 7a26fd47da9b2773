// Reference kernels: elementwise ops.
#include "ops/common.hpp"

namespace basalt {

void register_elementwise_ops(OpRegistry& r) { (void)r; }

}  // namespace basalt
