// TensorProto -> Tensor, with zero-copy views into mapped memory where alignment allows,
// external data resolution confined to the model's folder, and size checks on every field.
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
  // Returns a view of the bytes; `keep_alive` receives the mapping that owns them.
  const uint8_t* resolve(const pb::TensorProto& t, size_t expected_bytes, std::shared_ptr<const void>& keep_alive,
                         const std::string& what);
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
// `ext` may be null (external data is then an error). `file_backed`: raw_data lies in a read-only
// file mapping, so the pages of data that had to be copied are given back right after the copy
// (this keeps peak memory during loading near one copy of the weights, not two).
Tensor tensor_from_proto(const pb::TensorProto& t, const std::string& what, std::shared_ptr<const void> keep_alive,
                         ExternalDataResolver* ext, bool file_backed = false);

// Densify a SparseTensorProto.
Tensor tensor_from_sparse_proto(const pb::SparseTensorProto& s, const std::string& what, ExternalDataResolver* ext);

}  // namespace basalt
