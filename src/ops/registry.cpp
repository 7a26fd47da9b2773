#include "ops/kernel.hpp"

namespace basalt {

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
    return r;
  }();
  return reg;
}

void OpRegistry::add(const std::string& domain, const std::string& op, int since, int until, KernelFactory f) {
  map_[canonical_domain(domain) + "::" + op].push_back({since, until, std::move(f)});
}

const KernelFactory* OpRegistry::find(const std::string& domain, const std::string& op, int opset) const {
  auto it = map_.find(canonical_domain(domain) + "::" + op);
  if (it == map_.end()) return nullptr;
  // The entry with the highest `since` that is <= opset and whose range covers it.
  const Entry* best = nullptr;
  for (const auto& e : it->second)
    if (e.since <= opset && opset <= e.until && (!best || e.since > best->since)) best = &e;
  return best ? &best->f : nullptr;
}

std::vector<std::string> OpRegistry::op_names() const {
  std::vector<std::string> r;
  for (auto& [k, v] : map_) r.push_back(k.rfind("::", 0) == 0 ? k.substr(2) : k);
  return r;
}

}  // namespace basalt
