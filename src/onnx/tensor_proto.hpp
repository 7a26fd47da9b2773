// TensorProto -> Tensor, with zero-copy views into mapped memory (misaligned ones only for byte
// readers: "Misaligned weights" below), external data resolution confined to the model's folder,
// and size checks on every field.
#pragma once

#include "core/mapped_file.hpp"
#include "onnx/proto.hpp"

#include <basalt/tensor.hpp>

#include <map>
#include <memory>
#include <string>

namespace basalt {

// Resolves TensorProto external_data (location/offset/length) relative to a base folder.
// A location that is absolute or escapes the folder (.., symlinks) is refused.
class ExternalDataResolver {
 public:
  explicit ExternalDataResolver(std::string base_dir) : base_dir_(std::move(base_dir)) {}
  // Returns a view of the bytes; `keep_alive` receives the mapping that owns them, and `file`
  // (when given) that mapping.
  const uint8_t* resolve(const pb::TensorProto& t, size_t expected_bytes, std::shared_ptr<const void>& keep_alive,
                         const std::string& what, const MappedFile** file = nullptr);
  size_t mapped_bytes() const;
  // See MappedFile::release_pages.
  void release_pages() const {
    for (auto& [k, f] : files_) f->release_pages();
  }

 private:
  std::string base_dir_;
  std::map<std::string, std::shared_ptr<MappedFile>> files_;
};

// `what` names the tensor in errors ("initializer 'conv1.weight'"). `keep_alive` owns the bytes
// that raw_data points into; when non-null, large aligned raw data is used in place.
// `ext` may be null (external data is then an error). `file`: the read-only file mapping that
// raw_data lies in (null when it is not a file: a model from memory). Then the pages of data that
// had to be copied are given back right after the copy (this keeps peak memory during loading
// near one copy of the weights, not two), and views record the file (Storage::file_fd) so that
// byte readers can read parts of them without mapping their pages (Tensor::read_bytes).
// External data always comes from a file mapping (the resolver's).
// `allow_misaligned`: see "Misaligned weights" below; false means the result is always aligned.
Tensor tensor_from_proto(const pb::TensorProto& t, const std::string& what, std::shared_ptr<const void> keep_alive,
                         ExternalDataResolver* ext, const MappedFile* file = nullptr, bool allow_misaligned = false);

// Misaligned weights. protobuf does not align raw_data (nor does every external-data writer), so
// a weight in the mapped file often starts at an address that is not a multiple of its element
// size, where a typed load is undefined behaviour (UBSan's alignment check). Copying such weights
// costs their full size in resident memory even when a run touches a few rows of them (an
// embedding table read by Gather). The contract:
//  - tensor_from_proto(..., allow_misaligned = true) returns a view of misaligned bytes
//    (Tensor::is_aligned() false) for numeric tensors of at least kMisalignedInPlaceMinBytes;
//    only the loader asks for it, for initializers and Constant values.
//  - Once the graph is built, the loader keeps such a view only when every reader is a node
//    input whose kernel declares OpKernel::reads_bytes_only for it; a weight that is a graph
//    output, captured by a subgraph, or read by any other kernel becomes an aligned copy
//    (aligned_weight_copy) before anything (optimizer constant folding included) reads it.
//  - create_kernels checks again with the final kernels, after optimization may have rewired
//    readers, so a kernel's compute() never sees a misaligned input it did not opt in to.
//  - A kept view counts as used in place (MemoryStats::weights_in_place_bytes): its pages are
//    resident only where a run reads them.
constexpr size_t kMisalignedInPlaceMinBytes = size_t(1) << 16;  // below this a copy costs little

// An aligned copy of weight `t` (a view of the model's bytes). When `t` views a file mapping
// (Storage::file_fd), the pages it covers are given back once copied (never for a model loaded
// from memory, where that would destroy the caller's data).
Tensor aligned_weight_copy(const Tensor& t);

// Densify a SparseTensorProto.
Tensor tensor_from_sparse_proto(const pb::SparseTensorProto& s, const std::string& what, ExternalDataResolver* ext);

}  // namespace basalt
