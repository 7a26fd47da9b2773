// The optimizer's passes (src/opt/optimizer.cpp lists them in order, with their levels).
// Each rewrites ctx.graph (one graph: the main graph or a subgraph; optimizer.cpp calls it once
// per graph) following the conventions of opt/graph_util.hpp, counts what it applied with
// ctx.applied(pattern) and says why a candidate was left alone with ctx.reject(...).
#pragma once

#include "opt/graph_util.hpp"

namespace basalt {

// ---- Basic (standard ops only): passes_basic.cpp
void remove_identity(PassContext& ctx);        // Identity, inference Dropout
void fold_constants(PassContext& ctx);         // constant inputs -> initializer; Shape/Size of static shapes
void fold_reshape_chains(PassContext& ctx);    // Reshape/Squeeze/Unsqueeze/Flatten chains -> one Reshape
void remove_dead_nodes(PassContext& ctx);      // nodes whose outputs nobody reads
// fuse_conv.cpp
void fuse_conv_bn(PassContext& ctx);           // Conv + BatchNormalization -> Conv (weights folded)
// fuse_affine.cpp
void fuse_conv_affine(PassContext& ctx);       // Conv + Mul/Add/Sub/Div by a per-channel constant -> Conv

// ---- Extended (basalt-domain ops): fuse_conv.cpp
void fuse_conv_activation(PassContext& ctx);   // Conv (+ residual Add) + activation -> basalt::FusedConv
void fuse_conv_post_affine(PassContext& ctx);  // FusedConv(act) -> Mul / Add by scalars -> its post_affine
void fuse_bn_activation(PassContext& ctx);     // BatchNormalization + activation -> basalt::FusedBatchNormalization
void fuse_gemm_activation(PassContext& ctx);   // Gemm + activation -> basalt::FusedMatMul
// fuse_affine.cpp (a standard op, but of opset 14: Extended, like the other new-opset rewrites)
void fuse_hardswish(PassContext& ctx);         // x * Clip(x + 3, 0, 6) / 6 and variants -> HardSwish(x)

// ---- All (layout for the fast kernels): layout_nchwc.cpp
void layout_nchwc(PassContext& ctx);           // conv/pool chains -> blocked basalt::Nchwc* ops

// ---- Extended, transformer patterns: fuse_transformer.cpp (the "fusions" pass file)
void fuse_layernorm(PassContext& ctx);
void fuse_gelu(PassContext& ctx);
void fuse_attention(PassContext& ctx);
void fuse_matmul_add(PassContext& ctx);
void fold_transpose_into_matmul(PassContext& ctx);

// ---- Extended, quantized graphs: fuse_quant.cpp
// DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul (-> Add) -> com.microsoft::DynamicQuantizeMatMul
void fuse_dynamic_quant_matmul(PassContext& ctx);

}  // namespace basalt
