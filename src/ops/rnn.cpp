// Reference kernels: rnn ops.
#include "ops/common.hpp"

namespace basalt {

void register_rnn_ops(OpRegistry& r) { (void)r; }

}  // namespace basalt
