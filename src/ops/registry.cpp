#include "ops/kernel.hpp"

namespace basalt {

void KernelDeleter::operator()(OpKernel* k) const { delete k; }

const OpRegistry& OpRegistry::instance() {
  static const OpRegistry reg = [] {
    OpRegistry r;
    // One line per family file of src/ops/ (declared in ops/kernel.hpp).
    for (auto family : {register_elementwise_ops, register_activation_ops, register_tensor_ops, register_pad_ops,
                        register_indexing_ops, register_reduce_ops, register_norm_ops, register_loss_ops,
                        register_linalg_ops, register_nn_ops, register_rnn_ops, register_quant_ops, register_dft_ops,
                        register_string_ops, register_random_ops, register_ml_ops, register_controlflow_ops,
                        register_sequence_ops, register_misc_ops, register_attention_ops, register_image_ops})
      family(r);
    r.check_traits();
    return r;
  }();
  return reg;
}

void OpRegistry::add(const std::string& domain, const std::string& op, int since, int until, KernelFactory f) {
  map_[canonical_domain(domain) + "::" + op].kernels.push_back({since, until, std::move(f)});
}

OpTraits& OpRegistry::def(const std::string& domain, const std::string& op) {
  return map_[canonical_domain(domain) + "::" + op].traits;
}

const OpTraits* OpRegistry::traits(const std::string& domain, const std::string& op) const {
  auto it = map_.find(canonical_domain(domain) + "::" + op);
  return it == map_.end() || it->second.kernels.empty() ? nullptr : &it->second.traits;
}

// A def() for an op that no family registers a kernel for is a typo in a family file.
void OpRegistry::check_traits() const {
  for (const auto& [key, op] : map_)
    if (op.kernels.empty()) BASALT_THROW(Internal, "op registry: traits declared for " + key + ", which has no kernel");
}

std::vector<OpRegistry::Listed> OpRegistry::list() const {
  std::vector<Listed> r;
  for (const auto& [key, op] : map_) {
    size_t sep = key.find("::");
    Listed l{key.substr(0, sep), key.substr(sep + 2), {}, &op.traits};
    for (const auto& e : op.kernels) l.opsets.emplace_back(e.since, e.until);
    r.push_back(std::move(l));
  }
  return r;
}

const OpTraits* op_traits(const Node& n) { return OpRegistry::instance().traits(n.domain, n.op_type); }

const KernelFactory* OpRegistry::find(const std::string& domain, const std::string& op, int opset) const {
  auto it = map_.find(canonical_domain(domain) + "::" + op);
  if (it == map_.end()) return nullptr;
  const auto& entries = it->second.kernels;
  // The entry with the highest `since` that is <= opset and whose range covers it.
  const Entry* best = nullptr;
  for (const auto& e : entries)
    if (e.since <= opset && opset <= e.until && (!best || e.since > best->since)) best = &e;
  return best ? &best->f : nullptr;
}

std::vector<std::string> OpRegistry::op_names() const {
  std::vector<std::string> r;
  for (auto& [k, v] : map_) r.push_back(k.rfind("::", 0) == 0 ? k.substr(2) : k);
  return r;
}

}  // namespace basalt
