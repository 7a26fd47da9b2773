// Tensor: an element type, a shape, and a reference to storage.
//
// Ownership: storage is reference counted (std::shared_ptr<Storage>). Copying a Tensor is cheap
// and aliases the same bytes. A Tensor may view memory it does not own (a memory-mapped weight,
// a caller's buffer): the Storage then holds a "keep-alive" reference to whatever owns the bytes,
// or nothing at all for caller-owned views (the caller guarantees lifetime).
//
// Value: what flows along a graph edge: a tensor, a sequence of tensors, or nothing (an empty
// optional / a missing optional input).
#pragma once

#include <basalt/dtype.hpp>
#include <basalt/error.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace basalt {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& s);  // product of dims (1 for a scalar)

// Memory blocks basalt has allocated since the process started: tensor storage, run arenas and
// heap workspaces. Tests read it to show that repeated runs of one shape allocate nothing new.
uint64_t allocation_count();
namespace detail {
void count_allocation();
}
std::string shape_str(const Shape& s);  // "[1,3,224,224]"

// The bytes a Tensor views: owned, mapped, a caller's buffer or a block of a session's pool. Its
// definition is internal (src/core/storage.hpp); a Tensor shares it by reference count.
struct Storage;

class Tensor {
 public:
  Tensor() = default;
  // Allocate (64-byte aligned). Numeric storage is zero-filled; strings are empty.
  Tensor(DType dtype, Shape shape);
  // Allocate without zero-filling numeric storage (the caller writes every element).
  static Tensor uninit(DType dtype, Shape shape);
  // A view of memory owned by someone else. keep_alive (may be null) is held while the view lives.
  static Tensor view(DType dtype, Shape shape, void* data, std::shared_ptr<const void> keep_alive);
  // A scalar or 1-D helper.
  template <class T>
  static Tensor scalar(T v) {
    Tensor t(dtype_of<T>::value, {});
    t.data<T>()[0] = v;
    return t;
  }
  template <class T>
  static Tensor from_vector(const std::vector<T>& v, Shape shape = {}) {
    if (shape.empty() && v.size() != 1) shape = {int64_t(v.size())};
    Tensor t(dtype_of<T>::value, shape);
    for (size_t i = 0; i < v.size(); ++i) t.data<T>()[i] = v[i];
    return t;
  }

  bool defined() const { return storage_ != nullptr || dtype_ != DType::Undefined; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_[size_t(i < 0 ? i + rank() : i)]; }
  int rank() const { return int(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }

  void* raw() { return data_; }
  const void* raw() const { return data_; }
  template <class T>
  T* data() {
    return static_cast<T*>(raw());
  }
  template <class T>
  const T* data() const {
    return static_cast<const T*>(raw());
  }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  // True when the tensor can be handed to a caller who may write or free it without a copy: its
  // bytes are basalt's (owned, or a block of a session's dynamic pool: Storage::exclusive) and no
  // other Tensor shares them (a weight forwarded by Identity, a second output of the same value,
  // an input view are all not). No storage counts as exclusive. The C API and Python bindings copy
  // a run's outputs for which this is false.
  bool owns_exclusively() const;

  // Same storage, new shape (numel must match). No copy.
  Tensor reshaped(Shape shape) const;
  // Deep copy (64-byte aligned, like every tensor basalt allocates).
  Tensor clone() const;
  // True when the data address is a multiple of the element size (or there is no data). Every
  // tensor basalt allocates is aligned. Only a view may not be: the loader leaves a large weight
  // whose raw_data protobuf placed at an odd offset in the mapped file only when every reader is a
  // kernel that copies it bytewise (OpKernel::reads_bytes_only); any other code must read such a
  // tensor with memcpy, or take clone() first.
  bool is_aligned() const {
    size_t es = dtype_size(dtype_);
    return es <= 1 || !raw() || reinterpret_cast<uintptr_t>(raw()) % es == 0;
  }
  // Copies bytes [offset, offset + n) of the data to dst: a byte read, safe on a misaligned
  // tensor. A view of a file mapping (Storage::file_fd) is read with pread when n is large enough
  // for the system call to pay (a row of an embedding table), so a run that reads a few rows of a
  // large weight does not make the surrounding pages resident. The caller checks the range.
  void read_bytes(size_t offset, size_t n, void* dst) const;
  // Element i converted to double / int64 (any numeric dtype). For shape-like inputs.
  double get_double(int64_t i) const;
  int64_t get_int(int64_t i) const;
  // All elements as int64 (for shape/axes/indices inputs of any integer dtype).
  std::vector<int64_t> to_int64_vector() const;

 private:
  struct NoFill {};
  Tensor(DType dtype, Shape shape, NoFill);
  void allocate(bool zero);
  DType dtype_ = DType::Undefined;
  Shape shape_;
  std::shared_ptr<Storage> storage_;
  void* data_ = nullptr;  // storage_'s bytes (cached: Storage is internal)
};

struct Value {
  enum class Kind : uint8_t { None, Tensor, Sequence };
  Kind kind = Kind::None;
  Tensor tensor;                                   // Kind::Tensor
  std::shared_ptr<std::vector<Tensor>> sequence;   // Kind::Sequence
  DType seq_elem_type = DType::Undefined;          // element type of an (empty) sequence

  Value() = default;
  Value(Tensor t) : kind(Kind::Tensor), tensor(std::move(t)) {}  // NOLINT: implicit
  static Value make_sequence(std::vector<Tensor> items, DType elem) {
    Value v;
    v.kind = Kind::Sequence;
    v.sequence = std::make_shared<std::vector<Tensor>>(std::move(items));
    v.seq_elem_type = elem;
    return v;
  }
  bool is_tensor() const { return kind == Kind::Tensor; }
  bool is_sequence() const { return kind == Kind::Sequence; }
  bool is_none() const { return kind == Kind::None; }
};

}  // namespace basalt
