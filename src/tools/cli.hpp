// Shared pieces of the CLI commands.
#pragma once

#include <basalt/basalt.hpp>

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace basalt {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Options that describe inputs, shared by run / bench / profile.
struct InputSpec {
  std::map<std::string, std::string> files;   // --input NAME=FILE
  std::map<std::string, Shape> shapes;        // --shape NAME=1x3x224x224 ('' = scalar)
  std::map<std::string, int64_t> dims;        // --dim SYMBOL=VALUE
  std::map<std::string, std::string> fills;   // --fill NAME=zeros|const:V|int:LO,HI|uniform:A,B
  uint64_t seed = 0;
};

// The word after option args[i] ("--iters 5": "5"), advancing i to it; a missing one is a
// UsageError naming the option ("--iters needs a value").
inline const std::string& next_value(const std::vector<std::string>& args, size_t& i) {
  if (i + 1 >= args.size()) throw UsageError(args[i] + " needs a value");
  return args[++i];
}

// Parses an integer option value; a UsageError names the option when `s` is not an integer or
// is below `lo` ("--threads must be >= 1").
int64_t parse_int_arg(const std::string& opt, const std::string& s, int64_t lo = INT64_MIN);

// Parses input options at args[i] (advancing i). Returns false if args[i] is not one of them.
bool parse_input_option(const std::vector<std::string>& args, size_t& i, InputSpec& spec);
// Session options shared by run, profile, bench and plan: --threads N, --memory-limit BYTES,
// --no-arena, --opt-level none|basic|extended|all, --spin-us US. Returns true when args[i] was one
// (i then points at its last word); usage errors throw UsageError.
bool parse_session_option(const std::vector<std::string>& args, size_t& i, SessionOptions& opts);
// The positional MODEL argument: the first non-option word. Another option or a second positional
// word is a UsageError naming it.
void take_model_arg(const std::string& a, std::string& model);
// Builds the feeds for a session from the spec (files, shapes, seeded random fill).
std::vector<std::pair<std::string, Value>> make_inputs(const Session& s, const InputSpec& spec);
// "float32 [1,3,224,224] min=.. max=.. mean=.."
std::string summarize(const Value& v);

int cmd_run(const std::vector<std::string>& args);
int cmd_plan(const std::vector<std::string>& args);  // cli_plan.cpp
int cmd_profile(const std::vector<std::string>& args);  // cli_profile.cpp
int cmd_bench(const std::vector<std::string>& args);    // cli_bench.cpp
int cmd_perf(const std::vector<std::string>& args);     // cli_perf.cpp: perf shapes | perf switch
int cmd_inspect(const std::vector<std::string>& args);
int cmd_optimize(const std::vector<std::string>& args);  // cli_optimize.cpp
int cmd_serve(const std::vector<std::string>& args);  // cli_serve.cpp: the KServe v2 server
int cmd_quantize(const std::vector<std::string>& args);  // cli_quantize.cpp: int8 models
int cmd_conformance(const std::vector<std::string>& args, const char* argv0);

}  // namespace basalt
