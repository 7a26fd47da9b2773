// Replays fuzz inputs through a fuzz target without libFuzzer (any compiler): each argument is a
// file or a folder of files. Prints "N passed, 0 failed"; a bug shows as a crash or sanitizer
// report (non-zero exit), which the test runner counts as a failure. Used by the CI suite
// fuzz-regressions on tests/fuzz/regressions/<target>/ (every crash the fuzzer found).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    if (fs::is_directory(argv[i])) {
      for (auto& e : fs::recursive_directory_iterator(argv[i]))
        if (e.is_regular_file()) files.push_back(e.path());
    } else {
      files.emplace_back(argv[i]);
    }
  }
  int n = 0;
  for (auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) {
      std::printf("FAIL %s: cannot read\n0 passed, 1 failed\n", f.c_str());
      return 1;
    }
    std::vector<uint8_t> b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(b.data(), b.size());
    ++n;
  }
  std::printf("%d passed, 0 failed\n", n);
  return 0;
}
