// Reference kernels: tensor ops.
#include "ops/common.hpp"

namespace basalt {

void register_tensor_ops(OpRegistry& r) { (void)r; }

}  // namespace basalt
