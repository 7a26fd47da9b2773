// Reference kernels: activation ops.
#include "ops/common.hpp"

namespace basalt {

void register_activation_ops(OpRegistry& r) { (void)r; }

}  // namespace basalt
