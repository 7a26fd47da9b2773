#include <basalt/tensor.hpp>

#include "core/pages.hpp"
#include "core/storage.hpp"

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <sstream>

#include <sys/mman.h>
#include <sys/sysinfo.h>
#include <unistd.h>

namespace basalt {

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) r += ",";
    r += std::to_string(s[i]);
  }
  return r + "]";
}

static std::atomic<uint64_t> g_allocations{0};
uint64_t allocation_count() { return g_allocations.load(std::memory_order_relaxed); }
void detail::count_allocation() { g_allocations.fetch_add(1, std::memory_order_relaxed); }

// Blocks from kMapThresholdBytes up are mapped directly (core/pages.hpp): munmap returns them to
// the OS at once, where a freed malloc block of that size may stay resident in the heap.

Storage::~Storage() {
  if (!owned || !data) return;
  if (dtype == DType::String) {
    auto* p = static_cast<std::string*>(data);
    for (size_t i = 0; i < count; ++i) p[i].~basic_string();
  }
  if (mapped) unmap_pages(data, bytes);
  else std::free(data);
}

// Largest tensor basalt will allocate in one piece; anything larger is certainly a bogus
// shape and would otherwise end in an OOM kill. (The per-session memory limit is stricter.)
static constexpr uint64_t kMaxTensorBytes = uint64_t(1) << 40;

// RAM + swap of this machine in bytes (0 if unknown). Under Linux overcommit, aligned_alloc of
// more than the machine has can succeed, and zero-filling it then ends in an OOM kill; a tensor
// larger than all memory can never be filled, so it is refused up front with a MemoryLimit error.
static uint64_t machine_memory_bytes() {
  static const uint64_t total = [] {
    struct sysinfo si {};
    if (sysinfo(&si) != 0) return uint64_t(0);
    return (uint64_t(si.totalram) + uint64_t(si.totalswap)) * uint64_t(si.mem_unit);
  }();
  return total;
}

Tensor::Tensor(DType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) { allocate(true); }
Tensor::Tensor(DType dtype, Shape shape, NoFill) : dtype_(dtype), shape_(std::move(shape)) { allocate(false); }
Tensor Tensor::uninit(DType dtype, Shape shape) { return Tensor(dtype, std::move(shape), NoFill{}); }

void Tensor::allocate(bool zero) {
  DType dtype = dtype_;
  // Validate the shape and guard against overflow before allocating.
  uint64_t n = 1;
  for (int64_t d : shape_) {
    if (d < 0) BASALT_THROW(InvalidArgument, "negative dimension in shape " + shape_str(shape_));
    if (d != 0 && n > std::numeric_limits<uint64_t>::max() / uint64_t(d))
      BASALT_THROW(MemoryLimit, "tensor shape " + shape_str(shape_) + " overflows");
    n *= uint64_t(d);
  }
  size_t es = dtype_size(dtype);
  if (es == 0) BASALT_THROW(Unsupported, std::string("cannot allocate a tensor of type ") + dtype_name(dtype));
  if (n > kMaxTensorBytes / es)
    BASALT_THROW(MemoryLimit, "tensor of shape " + shape_str(shape_) + " and type " + dtype_name(dtype) +
                                  " needs more than 1 TiB");
  size_t bytes = size_t(n) * es;
  if (uint64_t mem = machine_memory_bytes(); mem != 0 && bytes > mem)
    BASALT_THROW(MemoryLimit, "tensor of shape " + shape_str(shape_) + " and type " + dtype_name(dtype) + " needs " +
                                  std::to_string(bytes) + " bytes, more than this machine's memory (" +
                                  std::to_string(mem) + " bytes of RAM + swap)");
  auto st = std::make_shared<Storage>();
  size_t alloc = (bytes + 63) / 64 * 64;
  if (alloc == 0) alloc = 64;
  void* p = nullptr;
  bool mapped = dtype != DType::String && alloc >= kMapThresholdBytes;
  if (mapped) {
    // Anonymous pages are zero-filled by the kernel: no memset needed, and untouched pages
    // never become resident. An uninitialized tensor is about to be written whole (its maker's
    // contract), so its pages are populated at once (core/pages.hpp).
    p = map_pages(bytes, false, /*populate=*/!zero);  // see core/pages.hpp on huge pages
  } else {
    p = std::aligned_alloc(64, alloc);
  }
  if (!p)
    BASALT_THROW(MemoryLimit, "out of memory allocating " + std::to_string(bytes) + " bytes for tensor " +
                                  shape_str(shape_));
  st->data = p;
  st->bytes = bytes;
  st->count = size_t(n);
  st->dtype = dtype;
  st->owned = true;
  st->mapped = mapped;
  detail::count_allocation();
  if (dtype == DType::String) {
    auto* s = static_cast<std::string*>(p);
    for (size_t i = 0; i < n; ++i) new (s + i) std::string();
  } else if (zero && !mapped) {
    std::memset(p, 0, alloc);
  }
  data_ = st->data;
  storage_ = std::move(st);
}

Tensor Tensor::view(DType dtype, Shape shape, void* data, std::shared_ptr<const void> keep_alive) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  auto st = std::make_shared<Storage>();
  st->data = data;
  st->bytes = size_t(shape_numel(t.shape_)) * dtype_size(dtype);
  st->count = size_t(shape_numel(t.shape_));
  st->dtype = dtype;
  st->owned = false;
  st->keep_alive = std::move(keep_alive);
  t.data_ = st->data;
  t.storage_ = std::move(st);
  return t;
}

Tensor Tensor::reshaped(Shape shape) const {
  if (shape_numel(shape) != numel())
    BASALT_THROW(InvalidArgument, "cannot reshape " + shape_str(shape_) + " to " + shape_str(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

bool Tensor::owns_exclusively() const {
  return !storage_ || ((storage_->owned || storage_->exclusive) && storage_.use_count() == 1);
}

void Tensor::read_bytes(size_t offset, size_t n, void* dst) const {
  const char* src = static_cast<const char*>(raw()) + offset;
  // Below this a system call costs more than the page fault it saves.
  constexpr size_t kPreadMinBytes = 256;
  if (storage_ && storage_->file_fd >= 0 && n >= kPreadMinBytes) {
    size_t done = 0;
    while (done < n) {
      ssize_t r = pread(storage_->file_fd, static_cast<char*>(dst) + done, n - done,
                        off_t(storage_->file_offset + offset + done));
      if (r > 0) done += size_t(r);
      else if (r < 0 && errno == EINTR) continue;
      else break;  // the mapping stays valid: copy the rest from it
    }
    if (done < n) std::memcpy(static_cast<char*>(dst) + done, src + done, n - done);
    return;
  }
  if (n) std::memcpy(dst, src, n);
}

Tensor Tensor::clone() const {
  Tensor t(dtype_, shape_);
  if (dtype_ == DType::String) {
    for (int64_t i = 0; i < numel(); ++i) t.data<std::string>()[i] = data<std::string>()[i];
  } else if (nbytes()) {
    std::memcpy(t.raw(), raw(), nbytes());
  }
  return t;
}

double Tensor::get_double(int64_t i) const {
  switch (dtype_) {
    case DType::Float: return data<float>()[i];
    case DType::Double: return data<double>()[i];
    case DType::Float16: return float(data<float16>()[i]);
    case DType::BFloat16: return float(data<bfloat16>()[i]);
    case DType::Int8: case DType::Int4: case DType::Int2: return data<int8_t>()[i];
    case DType::Uint8: case DType::Uint4: case DType::Uint2: return data<uint8_t>()[i];
    case DType::Int16: return data<int16_t>()[i];
    case DType::Uint16: return data<uint16_t>()[i];
    case DType::Int32: return data<int32_t>()[i];
    case DType::Uint32: return data<uint32_t>()[i];
    case DType::Int64: return double(data<int64_t>()[i]);
    case DType::Uint64: return double(data<uint64_t>()[i]);
    case DType::Bool: return data<bool>()[i] ? 1.0 : 0.0;
    default: BASALT_THROW(Unsupported, std::string("cannot read a number from a tensor of type ") + dtype_name(dtype_));
  }
}

int64_t Tensor::get_int(int64_t i) const {
  switch (dtype_) {
    case DType::Int64: return data<int64_t>()[i];
    case DType::Int32: return data<int32_t>()[i];
    case DType::Uint64: return int64_t(data<uint64_t>()[i]);
    default: return int64_t(get_double(i));
  }
}

std::vector<int64_t> Tensor::to_int64_vector() const {
  std::vector<int64_t> v(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i) v[size_t(i)] = get_int(i);
  return v;
}

}  // namespace basalt
