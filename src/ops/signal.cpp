// Reference kernels: signal ops.
#include "ops/common.hpp"

namespace basalt {

void register_signal_ops(OpRegistry& r) { (void)r; }

}  // namespace basalt
