#include "core/config.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace basalt {

namespace {

// One of `allowed` (index returned), or -1 with a warning.
int choice(EnvConfig& c, const char* name, const char* v, std::initializer_list<const char*> allowed) {
  int i = 0;
  std::string list;
  for (const char* a : allowed) {
    if (!std::strcmp(v, a)) return i;
    list += (i ? " | " : "") + std::string(a);
    ++i;
  }
  c.warnings.push_back(std::string(name) + "='" + v + "' is not one of " + list + "; ignored");
  return -1;
}

const char* from_process(const char* name) { return std::getenv(name); }

}  // namespace

EnvConfig parse_env_config(const char* (*get)(const char* name)) {
  EnvConfig c;
  if (const char* v = get("BASALT_ISA"); v && *v) {
    static const char* const kIsa[] = {"portable", "avx2", "avx512"};
    int k = choice(c, "BASALT_ISA", v, {"portable", "avx2", "avx512"});
    if (k >= 0) c.isa = kIsa[k];
  }
  if (const char* v = get("BASALT_FMA512_PIPES"); v && *v) {
    int k = choice(c, "BASALT_FMA512_PIPES", v, {"1", "2"});
    if (k >= 0) c.fma512_pipes = k + 1;
  }
  if (const char* v = get("BASALT_WINOGRAD"); v && *v) {
    static const int kTile[] = {0, 2, 4};
    int k = choice(c, "BASALT_WINOGRAD", v, {"0", "2", "4"});
    if (k >= 0) c.winograd = kTile[k];
  }
  auto flag = [&](const char* name, bool& field) {
    if (const char* v = get(name); v && *v) {
      int k = choice(c, name, v, {"0", "1"});
      if (k >= 0) field = k == 1;
    }
  };
  flag("BASALT_NCHWC", c.nchwc);
  flag("BASALT_HUGE_PAGES", c.huge_pages);
  flag("BASALT_POOL_APART", c.pool_apart);
  flag("BASALT_PLAN_IN_PLACE", c.plan_in_place);
  c.plan_debug = get("BASALT_PLAN_DEBUG") != nullptr;
  return c;
}

const EnvConfig& env_config() {
  static const EnvConfig c = [] {
    EnvConfig r = parse_env_config(from_process);
    for (const auto& w : r.warnings) std::fprintf(stderr, "basalt: warning: %s\n", w.c_str());
    return r;
  }();
  return c;
}

}  // namespace basalt
