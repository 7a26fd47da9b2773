// A read-only memory mapping of a whole file. Shared (std::shared_ptr) by every tensor that views
// into it, so weights stay valid exactly as long as something uses them; unmapped on release.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace basalt {

// Gives back the whole pages inside [p, p+n) of a read-only private file mapping (madvise
// MADV_DONTNEED): a later read faults them in from the file again. Only for memory of such a
// mapping (Storage::file_fd >= 0 marks tensors that view one): on anonymous or caller memory it
// would destroy data.
void release_file_pages(const void* p, size_t n);

class MappedFile {
 public:
  // Throws Error(Io) naming the path when it cannot be opened or mapped.
  static std::shared_ptr<MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // The file, open for reading while the mapping lives (pread of a few bytes without mapping their
  // pages; see Storage::file_fd); -1 for an empty file.
  int fd() const { return fd_; }
  // Gives the pages read so far back to the OS (madvise MADV_DONTNEED). The mapping stays valid:
  // a later access reads the page from the file again. Called after loading, when most weights
  // have been copied (unaligned raw data) and their file pages are no longer needed.
  void release_pages() const;

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;
  std::string path_;
};

}  // namespace basalt
