// Reference kernels: sequence ops.
#include "ops/common.hpp"

namespace basalt {

void register_sequence_ops(OpRegistry& r) { (void)r; }

}  // namespace basalt
