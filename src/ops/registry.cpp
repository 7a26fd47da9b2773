#include "ops/kernel.hpp"

namespace basalt {

void KernelDeleter::operator()(OpKernel* k) const { delete k; }

const OpRegistry& OpRegistry::instance() {
  static const OpRegistry reg = [] {
    OpRegistry r;
    register_elementwise_ops(r);
    register_activation_ops(r);
    register_tensor_ops(r);
    register_indexing_ops(r);
    register_reduce_ops(r);
    register_nn_ops(r);
    register_rnn_ops(r);
    register_quant_ops(r);
    register_signal_ops(r);
    register_controlflow_ops(r);
    register_sequence_ops(r);
    register_misc_ops(r);
    register_attention_ops(r);
    register_image_ops(r);
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
