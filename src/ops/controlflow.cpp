// Reference kernels: controlflow ops.
#include "ops/common.hpp"

namespace basalt {

void register_controlflow_ops(OpRegistry& r) { (void)r; }

}  // namespace basalt
