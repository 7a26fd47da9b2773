// libFuzzer target: the external-data resolver. The input picks a location string, offset,
// length and dims for an initializer stored outside the model; the resolver must return bytes
// inside <tmp>/model/ or throw basalt::Error, never read outside the file or the folder.
// The folder holds model/w.bin (4 KiB), model/sub/v.bin and, outside, secret.bin.
#include "onnx/tensor_proto.hpp"

#include <basalt/error.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

namespace {

// The folder lives under the temp dir for the process's life and is removed at exit (a
// function-local static's destructor), so runs do not leave one folder each behind.
struct Folder {
  std::filesystem::path root;
  std::string model;
  Folder() {
    namespace fs = std::filesystem;
    root = fs::temp_directory_path() / std::string("basalt_fuzz_ext_").append(std::to_string(::getpid()));
    fs::create_directories(root / "model" / "sub");
    auto write = [](const fs::path& p, size_t n, char c) { std::ofstream(p, std::ios::binary) << std::string(n, c); };
    write(root / "model" / "w.bin", 4096, 'w');
    write(root / "model" / "sub" / "v.bin", 100, 'v');
    write(root / "secret.bin", 4096, 's');
    std::error_code ec;
    fs::create_symlink(root / "secret.bin", root / "model" / "link.bin", ec);
    model = (root / "model").string();
  }
  ~Folder() {
    std::error_code ec;
    std::filesystem::remove_all(root, ec);
  }
};

struct Bytes {
  const uint8_t* p;
  size_t n;
  uint8_t next() {
    if (!n) return 0;
    --n;
    return *p++;
  }
  uint64_t u64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | next();
    return v;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Folder folder;
  const std::string& dir = folder.model;
  Bytes in{data, size};
  basalt::pb::TensorProto t;
  t.name = "w";
  t.data_type = 1 + in.next() % 16;
  t.data_location = 1;
  int rank = in.next() % 4;
  for (int i = 0; i < rank; ++i) t.dims.push_back(int64_t(in.u64() >> (in.next() % 64)));
  static const char* kLocs[] = {"w.bin", "sub/v.bin", "../secret.bin", "/etc/passwd", "link.bin", "sub/../w.bin",
                                "missing.bin", "", ".", "sub", "w.bin/x"};
  std::string loc = kLocs[in.next() % (sizeof kLocs / sizeof *kLocs)];
  if (in.next() & 1) {  // or a free-form location from the input
    size_t len = in.next() % 32;
    loc.clear();
    for (size_t i = 0; i < len; ++i) loc.push_back(char(in.next()));
  }
  t.external_data.emplace_back("location", loc);
  uint8_t flags = in.next();
  if (flags & 1) t.external_data.emplace_back("offset", std::to_string(in.u64() >> (in.next() % 64)));
  if (flags & 2) t.external_data.emplace_back("length", std::to_string(in.u64() >> (in.next() % 64)));
  if (flags & 4) t.external_data.emplace_back("offset", std::string("-").append(std::to_string(in.next())));
  if (flags & 8) t.external_data.emplace_back("checksum", "x");
  try {
    basalt::ExternalDataResolver ext(dir);
    basalt::Tensor x = basalt::tensor_from_proto(t, "initializer 'w'", nullptr, &ext);
    // Reading every byte makes ASan catch a view that points past the mapped file.
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < x.nbytes() && x.dtype() != basalt::DType::String; ++i)
      sink = sink ^ static_cast<const uint8_t*>(x.raw())[i];
    (void)sink;
  } catch (const basalt::Error&) {
  }
  return 0;
}
