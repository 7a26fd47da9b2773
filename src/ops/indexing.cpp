// Reference kernels: indexing ops.
#include "ops/common.hpp"

namespace basalt {

void register_indexing_ops(OpRegistry& r) { (void)r; }

}  // namespace basalt
