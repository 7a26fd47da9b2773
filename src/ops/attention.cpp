// Reference kernels: attention-family and other recent ops.
#include "ops/common.hpp"

namespace basalt {

void register_attention_ops(OpRegistry& r) { (void)r; }

}  // namespace basalt
