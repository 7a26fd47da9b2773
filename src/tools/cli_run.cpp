#include "graph/model.hpp"
#include "tools/cli.hpp"
#include "opt/optimizer.hpp"
#include "tools/npy.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <sys/resource.h>
#include <unistd.h>
#include "runtime/session_access.hpp"

namespace basalt {

static std::pair<std::string, std::string> split_last_eq(const std::string& opt, const std::string& s) {
  auto k = s.rfind('=');
  if (k == std::string::npos || k == 0) throw UsageError(opt + " expects NAME=VALUE, got '" + s + "'");
  return {s.substr(0, k), s.substr(k + 1)};
}

int64_t parse_int_arg(const std::string& opt, const std::string& s, int64_t lo) {
  int64_t v = 0;
  try {
    size_t used = 0;
    v = std::stoll(s, &used);
    if (used != s.size()) throw std::invalid_argument("trailing");
  } catch (const std::exception&) {
    throw UsageError(opt + ": '" + s + "' is not an integer");
  }
  if (v < lo) throw UsageError(opt + " must be >= " + std::to_string(lo));
  return v;
}

static double parse_double(const std::string& opt, const std::string& s) {
  try {
    size_t used = 0;
    double v = std::stod(s, &used);
    if (used != s.size()) throw std::invalid_argument("trailing");
    return v;
  } catch (const std::exception&) {
    throw UsageError(opt + ": '" + s + "' is not a number");
  }
}

bool parse_input_option(const std::vector<std::string>& args, size_t& i, InputSpec& spec) {
  const std::string& a = args[i];
  if (a == "--input") {
    auto [n, f] = split_last_eq(a, next_value(args, i));
    spec.files[n] = f;
  } else if (a == "--shape") {
    auto [n, s] = split_last_eq(a, next_value(args, i));
    Shape shape;
    if (!s.empty()) {
      std::stringstream ss(s);
      std::string part;
      while (std::getline(ss, part, 'x')) {
        int64_t d;
        try {
          d = parse_int_arg(a, part);
        } catch (const UsageError&) {
          throw UsageError(a + ": '" + s + "' is not a shape like 1x3x224x224");
        }
        if (d < 0) throw UsageError(a + ": negative dimension in '" + s + "'");
        shape.push_back(d);
      }
    }
    spec.shapes[n] = shape;
  } else if (a == "--dim") {
    auto [n, v] = split_last_eq(a, next_value(args, i));
    int64_t d = parse_int_arg(a, v);
    if (d < 0) throw UsageError(a + ": negative value for " + n);
    spec.dims[n] = d;
  } else if (a == "--fill") {
    auto [n, f] = split_last_eq(a, next_value(args, i));
    if (!(f == "zeros" || f.rfind("const:", 0) == 0 || f.rfind("int:", 0) == 0 || f.rfind("uniform:", 0) == 0))
      throw UsageError(a + ": fill must be zeros, const:V, int:LO,HI or uniform:A,B; got '" + f + "'");
    spec.fills[n] = f;
  } else if (a == "--seed") {
    spec.seed = uint64_t(parse_int_arg(a, next_value(args, i)));
  } else {
    return false;
  }
  return true;
}

static void fill_tensor(Tensor& t, const std::string& fill, std::mt19937_64& rng, const std::string& name) {
  int64_t n = t.numel();
  DType dt = t.dtype();
  auto set = [&](int64_t i, double v) {
    switch (dt) {
      case DType::Float: t.data<float>()[i] = float(v); break;
      case DType::Double: t.data<double>()[i] = v; break;
      case DType::Float16: t.data<float16>()[i] = float16(float(v)); break;
      case DType::BFloat16: t.data<bfloat16>()[i] = bfloat16(float(v)); break;
      case DType::Int8: t.data<int8_t>()[i] = int8_t(v); break;
      case DType::Uint8: t.data<uint8_t>()[i] = uint8_t(v); break;
      case DType::Int16: t.data<int16_t>()[i] = int16_t(v); break;
      case DType::Uint16: t.data<uint16_t>()[i] = uint16_t(v); break;
      case DType::Int32: t.data<int32_t>()[i] = int32_t(v); break;
      case DType::Uint32: t.data<uint32_t>()[i] = uint32_t(v); break;
      case DType::Int64: t.data<int64_t>()[i] = int64_t(v); break;
      case DType::Uint64: t.data<uint64_t>()[i] = uint64_t(v); break;
      case DType::Bool: t.data<bool>()[i] = v != 0; break;
      case DType::String: t.data<std::string>()[i] = std::to_string(int64_t(v)); break;
      default: BASALT_THROW(Unsupported, "input '" + name + "': cannot fill a " + dtype_name(dt) + " tensor");
    }
  };
  if (fill == "zeros") {
    for (int64_t i = 0; i < n; ++i) set(i, 0);
  } else if (fill.rfind("const:", 0) == 0) {
    double v = parse_double("--fill", fill.substr(6));
    for (int64_t i = 0; i < n; ++i) set(i, v);
  } else if (fill.rfind("int:", 0) == 0 || fill.rfind("uniform:", 0) == 0) {
    bool is_int = fill[0] == 'i';
    std::string r = fill.substr(is_int ? 4 : 8);
    auto c = r.find(',');
    if (c == std::string::npos) throw UsageError("--fill " + fill + ": expected LO,HI");
    double lo = parse_double("--fill", r.substr(0, c)), hi = parse_double("--fill", r.substr(c + 1));
    if (!(hi > lo)) throw UsageError("--fill " + fill + ": HI must be greater than LO");
    if (is_int) {
      std::uniform_int_distribution<int64_t> d(int64_t(lo), int64_t(hi) - 1);
      for (int64_t i = 0; i < n; ++i) set(i, double(d(rng)));
    } else {
      std::uniform_real_distribution<double> d(lo, hi);
      for (int64_t i = 0; i < n; ++i) set(i, d(rng));
    }
  } else {  // default: floats uniform [-1,1), integers [0,4), bools random
    if (dtype_is_float(dt)) {
      std::uniform_real_distribution<double> d(-1.0, 1.0);
      for (int64_t i = 0; i < n; ++i) set(i, d(rng));
    } else if (dt == DType::Bool) {
      std::uniform_int_distribution<int> d(0, 1);
      for (int64_t i = 0; i < n; ++i) set(i, d(rng));
    } else {
      std::uniform_int_distribution<int> d(0, 3);
      for (int64_t i = 0; i < n; ++i) set(i, d(rng));
    }
  }
}

std::vector<std::pair<std::string, Value>> make_inputs(const Session& s, const InputSpec& spec) {
  std::vector<std::pair<std::string, Value>> feeds;
  for (auto& [n, f] : spec.files) {
    bool known = false;
    for (auto& io : s.inputs()) known |= io.name == n;
    if (!known) BASALT_THROW(InvalidArgument, "--input: the model has no input '" + n + "'");
  }
  for (auto& [n, f] : spec.shapes) {
    bool known = false;
    for (auto& io : s.inputs()) known |= io.name == n;
    if (!known) BASALT_THROW(InvalidArgument, "--shape: the model has no input '" + n + "'");
  }
  for (size_t k = 0; k < s.inputs().size(); ++k) {
    const IoInfo& io = s.inputs()[k];
    auto fi = spec.files.find(io.name);
    if (fi != spec.files.end()) {
      feeds.emplace_back(io.name, Value(read_npy(fi->second)));
      continue;
    }
    if (io.has_default && !spec.shapes.count(io.name) && !spec.fills.count(io.name)) continue;
    if (io.kind != "tensor")
      BASALT_THROW(Unsupported, "input '" + io.name + "' is a " + io.kind + "; only tensor inputs can be generated");
    Shape shape;
    auto si = spec.shapes.find(io.name);
    if (si != spec.shapes.end()) {
      shape = si->second;
    } else {
      for (size_t d = 0; d < io.shape.size(); ++d) {
        if (io.shape[d] >= 0) {
          shape.push_back(io.shape[d]);
        } else {
          auto di = spec.dims.find(io.dim_params[d]);
          shape.push_back(di != spec.dims.end() && !io.dim_params[d].empty() ? di->second : 1);
        }
      }
    }
    DType dt = io.dtype == DType::Undefined ? DType::Float : io.dtype;
    Tensor t(dt, shape);
    std::mt19937_64 rng(spec.seed * 1000003ull + k);
    auto fl = spec.fills.find(io.name);
    fill_tensor(t, fl == spec.fills.end() ? "" : fl->second, rng, io.name);
    feeds.emplace_back(io.name, Value(std::move(t)));
  }
  return feeds;
}

static std::string tensor_summary(const Tensor& t) {
  std::ostringstream os;
  os << dtype_name(t.dtype()) << " " << shape_str(t.shape());
  int64_t n = t.numel();
  if (n == 0) return os.str();
  if (t.dtype() == DType::String) {
    os << " first='" << t.data<std::string>()[0] << "'";
    return os.str();
  }
  bool numeric = dtype_is_float(t.dtype()) || dtype_is_integer(t.dtype()) || t.dtype() == DType::Bool;
  if (!numeric || t.dtype() == DType::Float4E2M1 || (dtype_is_float(t.dtype()) && dtype_size(t.dtype()) == 1)) return os.str();
  double mn = INFINITY, mx = -INFINITY, sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    double v = t.get_double(i);
    mn = std::min(mn, v);
    mx = std::max(mx, v);
    sum += v;
  }
  os.precision(6);
  os << " min=" << mn << " max=" << mx << " mean=" << sum / double(n);
  os << " first=[";
  for (int64_t i = 0; i < std::min<int64_t>(n, 4); ++i) os << (i ? ", " : "") << t.get_double(i);
  os << (n > 4 ? ", ...]" : "]");
  return os.str();
}

std::string summarize(const Value& v) {
  if (v.is_none()) return "none (empty optional)";
  if (v.is_tensor()) return tensor_summary(v.tensor);
  std::string s = "sequence of " + std::to_string(v.sequence->size());
  if (!v.sequence->empty()) s += "; [0]: " + tensor_summary((*v.sequence)[0]);
  return s;
}

// Current resident set size (from /proc/self/statm), in MB.
static double rss_mb() {
  long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return double(resident) * double(sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

static double peak_rss_mb() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0;
}

bool parse_session_option(const std::vector<std::string>& args, size_t& i, SessionOptions& opts) {
  const std::string& a = args[i];
  if (a == "--threads") {
    opts.threads = int(parse_int_arg(a, next_value(args, i), 1));
  } else if (a == "--memory-limit") {
    if (i + 1 >= args.size()) throw UsageError("--memory-limit needs a value in bytes");
    opts.memory_limit = uint64_t(parse_int_arg(a, next_value(args, i), 0));
  } else if (a == "--no-arena") {
    opts.memory_plan = false;
  } else if (a == "--no-winograd") {
    opts.winograd = false;
  } else if (a == "--opt-level") {
    const std::string& v = next_value(args, i);
    try {
      opts.optimization_level = int(parse_opt_level(v));
    } catch (const Error&) {
      throw UsageError("--opt-level must be none, basic, extended or all (or 0..3), got '" + v + "'");
    }
  } else if (a == "--spin-us") {
    opts.spin_us = int(parse_int_arg(a, next_value(args, i), 0));
  } else if (a == "--dynamic-pool-bytes") {
    opts.dynamic_pool_bytes = uint64_t(parse_int_arg(a, next_value(args, i), 0));
  } else {
    return false;
  }
  return true;
}

void take_model_arg(const std::string& a, std::string& model) {
  if (!a.empty() && a[0] == '-') throw UsageError("unknown option '" + a + "'");
  if (!model.empty()) throw UsageError("unexpected argument '" + a + "'");
  model = a;
}

int cmd_run(const std::vector<std::string>& args) {
  InputSpec spec;
  std::string model, outdir;
  SessionOptions opts;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (parse_input_option(args, i, spec) || parse_session_option(args, i, opts)) continue;
    if (a == "--output-dir") {
      outdir = next_value(args, i);
    } else if (a == "--profile") {
      if (i + 1 >= args.size()) throw UsageError("--profile needs a file name");
      opts.profile_path = args[++i];
      if (opts.profile_path.empty()) throw UsageError("--profile needs a file name");
    } else {
      take_model_arg(a, model);
    }
  }
  if (model.empty()) throw UsageError("missing MODEL");
  auto t0 = std::chrono::steady_clock::now();
  auto session = Session::open(model, opts);
  auto t1 = std::chrono::steady_clock::now();
  double rss_after_load = rss_mb();
  auto feeds = make_inputs(*session, spec);
  auto t2 = std::chrono::steady_clock::now();
  auto outs = session->run(feeds);
  auto t3 = std::chrono::steady_clock::now();
  auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  for (auto& [n, v] : feeds) std::printf("input  %s: %s\n", n.c_str(), summarize(v).c_str());
  for (size_t k = 0; k < outs.size(); ++k)
    std::printf("output %s: %s\n", session->outputs()[k].name.c_str(), summarize(outs[k]).c_str());
  std::printf("load %.2f ms, run %.2f ms, RSS after load %.1f MB, peak RSS %.1f MB\n", ms(t0, t1), ms(t2, t3),
              rss_after_load, peak_rss_mb());
  MemoryStats mst = session->memory_stats();
  std::printf("memory: arena %llu bytes (planned), heap fallbacks %llu, unplanned heap %llu bytes\n",
              (unsigned long long)mst.last_run_arena_bytes, (unsigned long long)mst.heap_fallbacks,
              (unsigned long long)mst.last_run_heap_bytes);
  if (!opts.profile_path.empty()) std::printf("profile: wrote %s\n", session->end_profiling().c_str());
  if (!outdir.empty()) {
    std::filesystem::create_directories(outdir);
    nlohmann::json j = nlohmann::json::array();
    for (size_t k = 0; k < outs.size(); ++k) {
      std::string file = "output_" + std::to_string(k) + ".npy";
      const Value& v = outs[k];
      if (!v.is_tensor())
        BASALT_THROW(Unsupported, "output '" + session->outputs()[k].name + "' is not a tensor; --output-dir writes tensors only");
      write_npy((std::filesystem::path(outdir) / file).string(), v.tensor);
      j.push_back({{"name", session->outputs()[k].name}, {"file", file}, {"dtype", dtype_name(v.tensor.dtype())},
                   {"shape", v.tensor.shape()}});
    }
    std::ofstream f(std::filesystem::path(outdir) / "outputs.json");
    f << j.dump(1) << "\n";
    if (!f) BASALT_THROW(Io, "cannot write outputs.json in '" + outdir + "'");
  }
  return 0;
}

static void histogram(const Graph& g, std::map<std::string, int>& h, int& subgraphs) {
  for (auto& n : g.nodes) {
    h[(n.domain.empty() ? "" : n.domain + ":") + n.op_type]++;
    for (auto& a : n.attrs) {
      if (a.g) {
        ++subgraphs;
        histogram(*a.g, h, subgraphs);
      }
      for (auto& sg : a.graphs) {
        ++subgraphs;
        histogram(*sg, h, subgraphs);
      }
    }
  }
}

int cmd_inspect(const std::vector<std::string>& args) {
  if (args.size() != 1 || args[0].empty() || args[0][0] == '-') throw UsageError("usage: basalt inspect MODEL");
  SessionOptions opts;
  opts.allow_unsupported = true;
  auto s = Session::open(args[0], opts);
  const Model& m = session_model(*s);
  std::printf("model: %s\n", args[0].c_str());
  std::printf("ir_version: %lld\n", (long long)m.ir_version);
  if (!m.producer_name.empty()) std::printf("producer: %s %s\n", m.producer_name.c_str(), m.producer_version.c_str());
  std::printf("opsets:");
  for (auto& [d, v] : m.opsets) std::printf(" %s=%lld", d.empty() ? "ai.onnx" : d.c_str(), (long long)v);
  std::printf("\ninputs:\n");
  auto dims = [](const IoInfo& io) {
    if (!io.has_shape) return std::string("(unknown shape)");
    std::string r = "[";
    for (size_t i = 0; i < io.shape.size(); ++i) {
      if (i) r += ", ";
      r += io.shape[i] >= 0 ? std::to_string(io.shape[i]) : (io.dim_params[i].empty() ? "?" : io.dim_params[i]);
    }
    return r + "]";
  };
  for (auto& io : s->inputs())
    std::printf("  %s: %s %s%s\n", io.name.c_str(), io.type_string().c_str(), dims(io).c_str(), io.has_default ? " (has default)" : "");
  std::printf("outputs:\n");
  for (auto& io : s->outputs()) std::printf("  %s: %s %s\n", io.name.c_str(), io.type_string().c_str(), dims(io).c_str());
  std::map<std::string, int> h;
  int subgraphs = 0;
  histogram(*m.graph, h, subgraphs);
  std::vector<std::pair<int, std::string>> ops;
  int total = 0;
  for (auto& [k, v] : h) {
    ops.emplace_back(-v, k);
    total += v;
  }
  std::sort(ops.begin(), ops.end());
  std::printf("nodes: %d (%d subgraphs; Constant nodes are folded into weights)\nops:\n", total, subgraphs);
  for (auto& [c, k] : ops) std::printf("  %-28s %d\n", k.c_str(), -c);
  std::printf("weights: %zu bytes (%zu used in place from the file, %zu copied)\n", m.weight_bytes, m.weight_bytes_in_place,
              m.weight_bytes - m.weight_bytes_in_place);
  if (m.unsupported.empty()) {
    std::printf("unsupported ops: none\n");
  } else {
    std::printf("unsupported ops: %zu\n", m.unsupported.size());
    for (auto& u : m.unsupported) std::printf("  %s\n", u.c_str());
  }
  return 0;
}

}  // namespace basalt
