// libFuzzer target: model bytes -> Session. Any byte string must load or throw basalt::Error;
// a crash, a sanitizer report, a hang or an allocation beyond -rss_limit_mb is a bug.
// Seeds: the conformance models (scripts/fuzz.sh). Build: `make fuzz` (clang-14, build-fuzz/).
#include <basalt/basalt.hpp>

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto s = basalt::Session::from_bytes(data, size);
    (void)s->inputs();
    (void)s->outputs();
  } catch (const basalt::Error&) {
  }
  return 0;
}
