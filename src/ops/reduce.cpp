// Reference kernels: reduce ops.
#include "ops/common.hpp"

namespace basalt {

void register_reduce_ops(OpRegistry& r) { (void)r; }

}  // namespace basalt
