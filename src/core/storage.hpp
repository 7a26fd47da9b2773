// The storage behind a Tensor (include/basalt/tensor.hpp keeps it opaque): the bytes, who owns
// them, and where a view of a mapped model file starts in it.
#pragma once

#include <basalt/tensor.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace basalt {

struct Storage {
  void* data = nullptr;
  size_t bytes = 0;
  size_t count = 0;             // element count (for String destruction)
  DType dtype = DType::Undefined;
  bool owned = false;           // allocated by basalt (freed in the destructor)
  bool mapped = false;          // owned and allocated with mmap (large blocks: munmap gives pages back)
  std::shared_ptr<const void> keep_alive;  // for views: whatever owns the bytes
  // A view whose bytes belong to it alone (a block of the session's dynamic pool, returned to the
  // pool when the last view goes): a run's output viewing one is handed to the caller as it is.
  bool exclusive = false;
  // For a view of a read-only file mapping: a descriptor of that file (owned by keep_alive) and
  // where the view starts in it, else -1. Tensor::read_bytes then copies with pread, so the pages
  // read never join this process's resident memory (a page fault maps up to 16 neighbours too).
  int file_fd = -1;
  uint64_t file_offset = 0;
  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage();
};

}  // namespace basalt
