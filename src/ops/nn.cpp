// The nn op families, registered in one list (each file declares its ops' kernels and traits).
#include "ops/nn_common.hpp"

namespace basalt {

void register_nn_ops(OpRegistry& r) {
  for (auto family : {nnops::register_nchwc_ops, nnops::register_conv_ops, nnops::register_pool_ops,
                      nnops::register_matmul_ops, nnops::register_sampling_ops})
    family(r);
}

}  // namespace basalt
