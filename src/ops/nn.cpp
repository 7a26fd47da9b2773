// Reference kernels: nn ops.
#include "ops/common.hpp"

namespace basalt {

void register_nn_ops(OpRegistry& r) { (void)r; }

}  // namespace basalt
