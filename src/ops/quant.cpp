// Reference kernels: quant ops.
#include "ops/common.hpp"

namespace basalt {

void register_quant_ops(OpRegistry& r) { (void)r; }

}  // namespace basalt
