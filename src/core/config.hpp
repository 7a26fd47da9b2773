// Every BASALT_* environment variable the library reads, read here and only here: once per
// process, the first time any of them is asked for. docs/configuration.md has the same table.
// A value that is set but not one of those listed is ignored with one warning on stderr naming
// the variable and what it accepts (the process goes on with the default).
//
//   variable             values                    default   what it changes
//   BASALT_ISA           portable | avx2 | avx512  best      caps the kernels' instruction set
//   BASALT_FMA512_PIPES  1 | 2                     detected  AVX-512 FMA pipes the Winograd routing assumes
//   BASALT_WINOGRAD      0 | 2 | 4                 per conv  0: no Winograd; 2 / 4: force F(2x2) / F(4x4)
//   BASALT_NCHWC         0 | 1                     1         0: no blocked (NCHWc) layout pass
//   BASALT_HUGE_PAGES    0 | 1                     0         1: 2 MB pages for large arenas
//   BASALT_POOL_APART    0 | 1                     1         0: no thread placement on a busy machine
//   BASALT_PLAN_IN_PLACE 0 | 1                     1         0: no in-place reuse in memory plans
//   BASALT_PLAN_DEBUG    set / unset               unset     set: print every planned-tensor miss
#pragma once

#include <string>
#include <vector>

namespace basalt {

struct EnvConfig {
  std::string isa;          // "" (best), "portable", "avx2", "avx512"
  int fma512_pipes = 0;     // 0: detect
  int winograd = -1;        // -1: choose per conv
  bool nchwc = true;
  bool huge_pages = false;
  bool pool_apart = true;
  bool plan_in_place = true;
  bool plan_debug = false;
  std::vector<std::string> warnings;  // one per ignored value (already printed)
};

// The process's configuration from its environment (read on first use, then fixed).
const EnvConfig& env_config();

// Parses an environment as env_config() does (for tests): get(name) returns the value or null.
EnvConfig parse_env_config(const char* (*get)(const char* name));

}  // namespace basalt
