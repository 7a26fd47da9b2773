// Model repository, model versions and their schedulers (see repository.hpp).
#include "serve/repository.hpp"

#include "opt/optimizer.hpp"

#include <nlohmann/json.hpp>

#include <sched.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace fs = std::filesystem;

namespace basalt::serve {

// ---- configuration -------------------------------------------------------------------------

ModelConfig parse_model_config(const std::string& text, const std::string& where, int default_threads) {
  ModelConfig c;
  c.session.threads = default_threads;
  c.session.shared_pool = true;  // the server's thread budget, shared by every model
  if (text.empty()) return c;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw ServeError(Status::BadRequest, where + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw ServeError(Status::BadRequest, where + ": must be a JSON object");
  auto int_of = [&](const std::string& key, const nlohmann::json& v, int64_t lo, int64_t hi) {
    if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
      throw ServeError(Status::BadRequest, where + ": \"" + key + "\" must be an integer in [" + std::to_string(lo) +
                                               ", " + std::to_string(hi) + "]");
    return v.get<int64_t>();
  };
  for (const auto& [key, v] : j.items()) {
    if (key == "threads") {
      c.session.threads = int(int_of(key, v, 1, 1024));
      c.session.shared_pool = false;  // a pool of its own, this size
    } else if (key == "optimization_level") {
      if (v.is_string()) {
        try {
          c.session.optimization_level = int(parse_opt_level(v.get<std::string>()));
        } catch (const Error& e) {
          throw ServeError(Status::BadRequest, where + ": \"optimization_level\": " + e.what());
        }
      } else {
        c.session.optimization_level = int(int_of(key, v, 0, 3));
      }
    } else if (key == "memory_limit") {
      c.session.memory_limit = uint64_t(int_of(key, v, 0, INT64_MAX));
    } else if (key == "spin_us") {
      c.session.spin_us = int(int_of(key, v, 0, 100000));
    } else if (key == "winograd") {
      if (!v.is_boolean()) throw ServeError(Status::BadRequest, where + ": \"winograd\" must be true or false");
      c.session.winograd = v.get<bool>();
    } else if (key == "precision") {
      if (!v.is_string() || v.get<std::string>() != "fp32")
        throw ServeError(Status::BadRequest, where + ": \"precision\" must be \"fp32\" (the only precision served now)");
      c.precision = v.get<std::string>();
    } else if (key == "instances") {
      c.instances = int(int_of(key, v, 1, 64));
    } else if (key == "max_batch_size") {
      c.max_batch_size = int(int_of(key, v, 0, 4096));
    } else if (key == "max_queue_delay_us") {
      c.max_queue_delay_us = int_of(key, v, 0, 10'000'000);
    } else if (key == "max_queue") {
      c.max_queue = int(int_of(key, v, 1, 1'000'000));
    } else if (key == "version_policy") {
      if (!v.is_string() || (v.get<std::string>() != "latest" && v.get<std::string>() != "all"))
        throw ServeError(Status::BadRequest, where + ": \"version_policy\" must be \"latest\" or \"all\"");
      c.all_versions = v.get<std::string>() == "all";
    } else {
      throw ServeError(Status::BadRequest,
                       where + ": unknown key \"" + key +
                           "\" (known: threads, optimization_level, memory_limit, spin_us, winograd, precision, "
                           "instances, max_batch_size, max_queue_delay_us, max_queue, version_policy)");
    }
  }
  try {
    c.session.validate();
  } catch (const Error& e) {
    throw ServeError(Status::BadRequest, where + ": " + e.what());
  }
  return c;
}

static int64_t read_int_file(const char* path, bool& ok) {
  std::ifstream f(path);
  int64_t v = 0;
  ok = bool(f >> v);
  return v;
}

int cpu_budget() {
  cpu_set_t set;
  int affinity = 0;
  if (sched_getaffinity(0, sizeof set, &set) == 0) affinity = CPU_COUNT(&set);
  if (affinity <= 0) affinity = int(std::max(1u, std::thread::hardware_concurrency()));
  int quota_cpus = 0;
  std::ifstream v2("/sys/fs/cgroup/cpu.max");
  std::string quota;
  int64_t period = 0;
  if (v2 >> quota >> period) {
    if (quota != "max" && period > 0) {
      int64_t q = std::atoll(quota.c_str());
      if (q > 0) quota_cpus = int((q + period - 1) / period);
    }
  } else {
    bool ok1 = false, ok2 = false;
    int64_t q = read_int_file("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", ok1);
    int64_t p = read_int_file("/sys/fs/cgroup/cpu/cpu.cfs_period_us", ok2);
    if (ok1 && ok2 && q > 0 && p > 0) quota_cpus = int((q + p - 1) / p);
  }
  int n = quota_cpus > 0 ? std::min(quota_cpus, affinity) : affinity;
  return std::max(1, n);
}

// ---- one model version: session + scheduler --------------------------------------------------

static Status status_of(const Error& e) {
  switch (e.code()) {
    case ErrorCode::InvalidArgument:
    case ErrorCode::MemoryLimit:
    case ErrorCode::Unsupported:
    case ErrorCode::InvalidModel: return Status::BadRequest;
    case ErrorCode::Cancelled: return Status::Unavailable;
    default: return Status::Internal;
  }
}

ModelVersion::ModelVersion(std::string name, std::string version, const std::string& path, const ModelConfig& cfg,
                           const ServerLimits& limits)
    : name_(std::move(name)), version_(std::move(version)), cfg_(cfg), limits_(limits) {
  std::string what = "model '" + name_ + "' version " + version_;
  try {
    session_ = Session::open(path, cfg_.session);
  } catch (const Error& e) {
    throw ServeError(Status::BadRequest, what + ": " + e.what());
  }
  auto check_io = [&](const IoInfo& io, const char* kind) {
    if (io.kind != "tensor")
      throw ServeError(Status::BadRequest, what + ": " + kind + " '" + io.name + "' is a " + io.kind +
                                               "; the protocol carries tensors only");
    if (!datatype_of(io.dtype))
      throw ServeError(Status::BadRequest, what + ": " + kind + " '" + io.name + "' has dtype " +
                                               dtype_name(io.dtype) + ", which the protocol cannot carry");
    if (cfg_.max_batch_size > 0 && (!io.has_shape || io.shape.empty() || io.shape[0] != -1))
      throw ServeError(Status::BadRequest, what + ": max_batch_size needs dim 0 of every input and output to be a "
                                                  "free batch dimension, but " + kind + " '" + io.name +
                                                  "' has shape " + (io.has_shape ? shape_str(io.shape) : "unknown"));
  };
  for (const auto& io : session_->inputs()) check_io(io, "input");
  for (const auto& io : session_->outputs()) check_io(io, "output");

  // What the budget counts: the weights (mapped in place or copied), the kernels' packed copies,
  // and per instance the planned peak of one run when every input shape is fixed, else the
  // model's memory limit (a run can never take more), else nothing known before it runs.
  MemoryStats ms = session_->memory_stats();
  uint64_t per_run = cfg_.session.memory_limit;
  bool fixed = true;
  for (const auto& io : session_->inputs())
    for (int64_t d : io.shape) fixed = fixed && d >= 0;
  if (fixed) {
    try {
      MemoryPlanReport r = session_->plan_memory({});
      per_run = r.arena_bytes + r.inputs_bytes + r.outputs_bytes;
    } catch (const Error&) {
    }
  }
  accounted_bytes_ = ms.weights_bytes + ms.packed_weights_bytes + per_run * uint64_t(cfg_.instances);
  for (int i = 0; i < cfg_.instances; ++i) workers_.emplace_back([this] { worker(); });
}

ModelVersion::~ModelVersion() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

int ModelVersion::queue_depth() const {
  std::lock_guard<std::mutex> lk(mu_);
  return int(queue_.size());
}

static std::string names_of(const std::vector<IoInfo>& ios) {
  std::string s;
  for (const auto& io : ios) s += (s.empty() ? "" : ", ") + io.name;
  return s;
}

void ModelVersion::check(const InferRequest& req) const {
  const auto& ins = session_->inputs();
  std::vector<bool> seen(ins.size(), false);
  int64_t batch = -1;
  for (const auto& in : req.inputs) {
    auto it = std::find_if(ins.begin(), ins.end(), [&](const IoInfo& io) { return io.name == in.name; });
    if (it == ins.end())
      throw ServeError(Status::BadRequest, "unknown input '" + in.name + "' for model '" + name_ + "' (its inputs: " +
                                               names_of(ins) + ")");
    size_t k = size_t(it - ins.begin());
    if (seen[k]) throw ServeError(Status::BadRequest, "input '" + in.name + "' given twice");
    seen[k] = true;
    const Tensor& t = in.tensor;
    if (t.dtype() != it->dtype)
      throw ServeError(Status::BadRequest, "input '" + in.name + "': datatype " + datatype_of(t.dtype()) + ", but model '" +
                                               name_ + "' expects " + datatype_of(it->dtype));
    if (it->has_shape) {
      if (t.rank() != int(it->shape.size()))
        throw ServeError(Status::BadRequest, "input '" + in.name + "': shape " + shape_str(t.shape()) + " has rank " +
                                                 std::to_string(t.rank()) + ", but model '" + name_ + "' expects " +
                                                 shape_str(it->shape) + " (-1 = any size)");
      for (int d = 0; d < t.rank(); ++d)
        if (it->shape[size_t(d)] >= 0 && it->shape[size_t(d)] != t.dim(d))
          throw ServeError(Status::BadRequest, "input '" + in.name + "': shape " + shape_str(t.shape()) +
                                                   ", but model '" + name_ + "' expects " + shape_str(it->shape) +
                                                   " (-1 = any size)");
    }
    if (cfg_.max_batch_size > 0) {
      if (batch >= 0 && t.dim(0) != batch)
        throw ServeError(Status::BadRequest, "input '" + in.name + "': batch dimension " + std::to_string(t.dim(0)) +
                                                 " differs from the other inputs' " + std::to_string(batch));
      batch = t.dim(0);
      if (batch > cfg_.max_batch_size)
        throw ServeError(Status::BadRequest, "input '" + in.name + "': batch " + std::to_string(batch) +
                                                 " is over model '" + name_ + "''s max_batch_size " +
                                                 std::to_string(cfg_.max_batch_size));
    }
  }
  for (size_t k = 0; k < ins.size(); ++k)
    if (!seen[k] && !ins[k].has_default)
      throw ServeError(Status::BadRequest, "missing input '" + ins[k].name + "' for model '" + name_ + "'");
  const auto& outs = session_->outputs();
  for (const auto& o : req.outputs)
    if (std::none_of(outs.begin(), outs.end(), [&](const IoInfo& io) { return io.name == o.name; }))
      throw ServeError(Status::BadRequest, "unknown output '" + o.name + "' for model '" + name_ + "' (its outputs: " +
                                               names_of(outs) + ")");
}

InferResponse ModelVersion::infer(InferRequest&& req) {
  check(req);
  auto p = std::make_shared<Pending>();
  p->request = std::move(req);
  p->enqueued = std::chrono::steady_clock::now();
  {
    std::unique_lock<std::mutex> lk(mu_);
    if (stopping_) throw ServeError(Status::Unavailable, "model '" + name_ + "' is unloading");
    if (cfg_.max_batch_size == 0 && queue_.empty() && running_ < cfg_.instances) {
      // A free instance and nobody waiting: run here, saving two thread hand-offs per request.
      ++running_;
      lk.unlock();
      in_flight_++;
      std::vector<std::shared_ptr<Pending>> one{p};
      run_timed(one);
      in_flight_--;
      lk.lock();
      --running_;
      bool more = !queue_.empty();
      lk.unlock();
      if (more) cv_.notify_one();
      if (!p->error.empty()) throw ServeError(p->error_status, p->error);
      return std::move(p->response);
    }
    if (int(queue_.size()) >= cfg_.max_queue)
      throw ServeError(Status::Unavailable, "model '" + name_ + "': queue full (" + std::to_string(queue_.size()) +
                                                " requests waiting, max_queue " + std::to_string(cfg_.max_queue) +
                                                "); retry later");
    queue_.push_back(p);
  }
  if (cfg_.max_batch_size > 0)
    cv_.notify_all();  // a worker filling a batch waits for more
  else
    cv_.notify_one();
  std::unique_lock<std::mutex> lk(p->mu);
  p->cv.wait(lk, [&] { return p->done; });
  if (!p->error.empty()) throw ServeError(p->error_status, p->error);
  return std::move(p->response);
}

bool ModelVersion::batchable_with(const InferRequest& a, const InferRequest& b) const {
  if (a.inputs.size() != b.inputs.size() || a.outputs.size() != b.outputs.size()) return false;
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    const Tensor &x = a.inputs[i].tensor, &y = b.inputs[i].tensor;
    if (a.inputs[i].name != b.inputs[i].name || x.dtype() != y.dtype() || x.rank() != y.rank()) return false;
    for (int d = 1; d < x.rank(); ++d)
      if (x.dim(d) != y.dim(d)) return false;
  }
  for (size_t i = 0; i < a.outputs.size(); ++i)
    if (a.outputs[i].name != b.outputs[i].name) return false;
  return true;
}

static int64_t batch_rows(const InferRequest& r) { return r.inputs.empty() ? 1 : r.inputs[0].tensor.dim(0); }

void ModelVersion::worker() {
  using clock = std::chrono::steady_clock;
  for (;;) {
    std::vector<std::shared_ptr<Pending>> batch;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return (stopping_ && queue_.empty()) || (!queue_.empty() && running_ < cfg_.instances); });
      if (queue_.empty()) return;  // stopping, and nothing left to answer
      batch.push_back(queue_.front());
      queue_.pop_front();
      if (cfg_.max_batch_size > 0 && !batch[0]->request.inputs.empty()) {
        int64_t rows = batch_rows(batch[0]->request);
        auto deadline = batch[0]->enqueued + std::chrono::microseconds(cfg_.max_queue_delay_us);
        for (;;) {
          for (auto it = queue_.begin(); it != queue_.end() && rows < cfg_.max_batch_size;) {
            int64_t r = batch_rows((*it)->request);
            if (rows + r <= cfg_.max_batch_size && batchable_with(batch[0]->request, (*it)->request)) {
              rows += r;
              batch.push_back(*it);
              it = queue_.erase(it);
            } else {
              ++it;
            }
          }
          if (rows >= cfg_.max_batch_size || stopping_ || clock::now() >= deadline) break;
          cv_.wait_until(lk, deadline);
        }
      }
      in_flight_ += int(batch.size());
      ++running_;
    }
    run_timed(batch);
    for (auto& p : batch) {
      {
        std::lock_guard<std::mutex> lk(p->mu);
        p->done = true;
      }
      p->cv.notify_one();
    }
    in_flight_ -= int(batch.size());
    std::lock_guard<std::mutex> lk(mu_);
    --running_;
    if (!queue_.empty()) cv_.notify_one();
  }
}

void ModelVersion::run_timed(std::vector<std::shared_ptr<Pending>>& batch) {
  auto start = std::chrono::steady_clock::now();
  for (auto& p : batch) metrics_.queue.observe(std::chrono::duration<double>(start - p->enqueued).count());
  run_batch(batch);
  double compute = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  metrics_.observe_batch(int(batch.size()));
  for (size_t i = 0; i < batch.size(); ++i) metrics_.compute.observe(compute);
}

static void fill_response(const Session& s, const InferRequest& req, std::vector<Value>&& outs, InferResponse& resp) {
  resp.outputs.clear();
  const auto& infos = s.outputs();
  for (size_t i = 0; i < outs.size(); ++i) {
    InferOutput o;
    if (req.outputs.empty()) {
      o.name = infos[i].name;
      o.binary = req.binary_outputs;
    } else {
      o.name = req.outputs[i].name;
      o.binary = req.outputs[i].binary;
    }
    if (!outs[i].is_tensor())
      throw ServeError(Status::Internal, "output '" + o.name + "' is not a tensor");
    o.tensor = std::move(outs[i].tensor);
    resp.outputs.push_back(std::move(o));
  }
}

static std::vector<std::string> output_names(const InferRequest& req) {
  std::vector<std::string> names;
  for (const auto& o : req.outputs) names.push_back(o.name);
  return names;
}

void ModelVersion::run_one(Pending& p) {
  try {
    std::vector<std::pair<std::string, Value>> feeds;
    for (auto& in : p.request.inputs) feeds.emplace_back(in.name, Value(in.tensor));
    auto outs = session_->run(feeds, output_names(p.request));
    p.response.model = name_;
    p.response.version = version_;
    p.response.id = p.request.id;
    fill_response(*session_, p.request, std::move(outs), p.response);
  } catch (const ServeError& e) {
    p.error = e.what(), p.error_status = e.status;
  } catch (const Error& e) {
    p.error = std::string("model '") + name_ + "': " + e.what(), p.error_status = status_of(e);
  } catch (const std::exception& e) {
    p.error = std::string("model '") + name_ + "': " + e.what(), p.error_status = Status::Internal;
  }
}

// Stacks the requests' inputs along dim 0, runs once and splits every output back by rows. When
// an output's dim 0 is not the total batch (the model does not keep rows apart), or the batched
// run fails, each request runs on its own so that one bad request cannot fail the others.
void ModelVersion::run_batch(std::vector<std::shared_ptr<Pending>>& batch) {
  if (batch.size() == 1) return run_one(*batch[0]);
  const InferRequest& first = batch[0]->request;
  std::vector<int64_t> rows;
  int64_t total = 0;
  for (auto& p : batch) rows.push_back(batch_rows(p->request)), total += rows.back();
  bool ok = false;
  try {
    std::vector<std::pair<std::string, Value>> feeds;
    for (size_t i = 0; i < first.inputs.size(); ++i) {
      const Tensor& t0 = first.inputs[i].tensor;
      Shape shape = t0.shape();
      shape[0] = total;
      Tensor cat = Tensor::uninit(t0.dtype(), shape);
      if (t0.dtype() == DType::String) {
        auto* dst = cat.data<std::string>();
        for (auto& p : batch) {
          const Tensor& t = p->request.inputs[i].tensor;
          for (int64_t k = 0; k < t.numel(); ++k) *dst++ = t.data<std::string>()[k];
        }
      } else {
        char* dst = static_cast<char*>(cat.raw());
        for (auto& p : batch) {
          const Tensor& t = p->request.inputs[i].tensor;
          std::memcpy(dst, t.raw(), t.nbytes());
          dst += t.nbytes();
        }
      }
      feeds.emplace_back(first.inputs[i].name, Value(std::move(cat)));
    }
    auto outs = session_->run(feeds, output_names(first));
    bool splittable = true;
    for (auto& v : outs) splittable = splittable && v.is_tensor() && v.tensor.rank() >= 1 && v.tensor.dim(0) == total;
    if (splittable) {
      int64_t row0 = 0;
      for (size_t b = 0; b < batch.size(); ++b) {
        std::vector<Value> mine;
        for (auto& v : outs) {
          const Tensor& t = v.tensor;
          Shape shape = t.shape();
          shape[0] = rows[b];
          Tensor part = Tensor::uninit(t.dtype(), shape);
          if (t.dtype() == DType::String) {
            int64_t per = t.numel() / total;
            for (int64_t k = 0; k < part.numel(); ++k) part.data<std::string>()[k] = t.data<std::string>()[row0 * per + k];
          } else {
            size_t row_bytes = t.nbytes() / size_t(total);
            std::memcpy(part.raw(), static_cast<const char*>(t.raw()) + size_t(row0) * row_bytes, part.nbytes());
          }
          mine.emplace_back(std::move(part));
        }
        Pending& p = *batch[b];
        p.response.model = name_;
        p.response.version = version_;
        p.response.id = p.request.id;
        fill_response(*session_, p.request, std::move(mine), p.response);
        row0 += rows[b];
      }
      ok = true;
    }
  } catch (const std::exception&) {
    ok = false;
  }
  if (!ok)
    for (auto& p : batch) run_one(*p);
}

// ---- the repository ---------------------------------------------------------------------------

const char* model_state_name(ModelState s) {
  switch (s) {
    case ModelState::Loading: return "LOADING";
    case ModelState::Ready: return "READY";
    case ModelState::Unavailable: return "UNAVAILABLE";
    case ModelState::Unloading: return "UNLOADING";
  }
  return "UNAVAILABLE";
}

void validate_model_name(const std::string& name) {
  bool ok = !name.empty() && name.size() <= 255 && name != "." && name != "..";
  for (char c : name)
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.');
  if (!ok)
    throw ServeError(Status::BadRequest, "invalid model name '" + name.substr(0, 64) +
                                             "' (letters, digits, '_', '-', '.'; not '.' or '..'; at most 255)");
}

Repository::Repository(std::string dir, ServerLimits limits) : limits_(limits) {
  std::error_code ec;
  fs::path p = fs::canonical(dir, ec);
  if (ec || !fs::is_directory(p, ec))
    throw ServeError(Status::BadRequest, "model repository '" + dir + "' is not a readable directory");
  dir_ = p.string();
}

Repository::~Repository() { unload_all(); }

static bool inside(const fs::path& root, const fs::path& p) {
  auto r = root.lexically_normal().string(), q = p.lexically_normal().string();
  return q.size() > r.size() && q.compare(0, r.size(), r) == 0 && q[r.size()] == '/';
}

std::string Repository::model_dir(const std::string& name) const {
  validate_model_name(name);
  std::error_code ec;
  fs::path p = fs::path(dir_) / name;
  if (!fs::exists(p, ec) || !fs::is_directory(p, ec))
    throw ServeError(Status::NotFound, "no model '" + name + "' in the repository " + dir_);
  fs::path c = fs::canonical(p, ec);
  if (ec || !inside(fs::path(dir_), c))
    throw ServeError(Status::BadRequest, "model '" + name + "' resolves outside the repository " + dir_);
  return c.string();
}

std::vector<std::string> Repository::scan() const {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    std::string n = e.path().filename().string();
    try {
      validate_model_name(n);
    } catch (const ServeError&) {
      continue;
    }
    if (e.is_directory(ec)) names.push_back(n);
  }
  std::sort(names.begin(), names.end());
  return names;
}

static std::string read_small_file(const fs::path& p, size_t max_bytes, const std::string& what) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw ServeError(Status::BadRequest, what + ": cannot read " + p.string());
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (s.size() > max_bytes) throw ServeError(Status::BadRequest, what + ": " + p.string() + " is over " + std::to_string(max_bytes) + " bytes");
  return s;
}

void Repository::load(const std::string& name) {
  std::lock_guard<std::mutex> serial(load_mu_);
  fs::path mdir = model_dir(name);
  std::error_code ec;
  fs::path cfg_path = mdir / "config.json";
  std::string cfg_text;
  if (fs::exists(cfg_path, ec)) {
    fs::path c = fs::canonical(cfg_path, ec);
    if (ec || !inside(fs::path(dir_), c))
      throw ServeError(Status::BadRequest, "model '" + name + "': config.json resolves outside the repository");
    cfg_text = read_small_file(c, 1 << 20, "model '" + name + "'");
  }
  std::vector<std::pair<int64_t, fs::path>> found;
  for (const auto& e : fs::directory_iterator(mdir, ec)) {
    std::string v = e.path().filename().string();
    if (v.empty() || v.size() > 18 || !std::all_of(v.begin(), v.end(), ::isdigit)) continue;
    fs::path file = e.path() / "model.onnx";
    if (!fs::exists(file, ec)) continue;
    fs::path c = fs::canonical(file, ec);
    if (ec || !inside(fs::path(dir_), c))
      throw ServeError(Status::BadRequest, "model '" + name + "' version " + v + ": model.onnx resolves outside the repository");
    found.emplace_back(std::stoll(v), c);
  }
  if (found.empty())
    throw ServeError(Status::BadRequest, "model '" + name + "' has no version: expected " + mdir.string() +
                                             "/<version>/model.onnx with a decimal version");
  std::sort(found.begin(), found.end());
  bool was_loaded;
  {
    std::lock_guard<std::mutex> lk(mu_);
    Entry& e = models_[name];
    was_loaded = !e.versions.empty();
    if (!was_loaded) e.state = ModelState::Loading, e.reason.clear();
  }
  auto fail = [&](const std::string& why) {
    std::lock_guard<std::mutex> lk(mu_);
    Entry& e = models_[name];
    if (e.versions.empty()) e.state = ModelState::Unavailable;
    e.reason = why;
  };
  std::map<int64_t, std::shared_ptr<ModelVersion>> fresh;
  try {
    ModelConfig cfg = parse_model_config(cfg_text, "model '" + name + "' config.json", limits_.thread_budget);
    size_t first = cfg.all_versions ? 0 : found.size() - 1;
    for (size_t i = first; i < found.size(); ++i)
      fresh[found[i].first] = std::make_shared<ModelVersion>(name, std::to_string(found[i].first), found[i].second.string(), cfg, limits_);
    if (limits_.memory_budget) {
      uint64_t need = 0, others = 0;
      for (auto& [v, mv] : fresh) need += mv->accounted_bytes();
      {
        std::lock_guard<std::mutex> lk(mu_);
        for (auto& [n, e] : models_)
          if (n != name)
            for (auto& [v, mv] : e.versions) others += mv->accounted_bytes();
      }
      if (others + need > limits_.memory_budget)
        throw ServeError(Status::BadRequest,
                         "loading model '" + name + "' needs " + std::to_string(need) +
                             " bytes (weights, packed weights and planned run memory per instance), but the server's "
                             "memory budget of " + std::to_string(limits_.memory_budget) + " bytes has " +
                             std::to_string(limits_.memory_budget > others ? limits_.memory_budget - others : 0) +
                             " left (" + std::to_string(others) + " taken by other models)");
    }
  } catch (const ServeError& e) {
    fail(e.what());
    throw;
  } catch (const std::exception& e) {
    fail(e.what());
    throw ServeError(Status::Internal, std::string("model '") + name + "': " + e.what());
  }
  std::map<int64_t, std::shared_ptr<ModelVersion>> old;
  {
    std::lock_guard<std::mutex> lk(mu_);
    Entry& e = models_[name];
    old.swap(e.versions);
    e.versions = std::move(fresh);
    e.state = ModelState::Ready;
    e.reason.clear();
  }
  old.clear();  // waits for the old versions' queued requests (outside the lock)
}

void Repository::unload(const std::string& name) {
  validate_model_name(name);
  std::lock_guard<std::mutex> serial(load_mu_);
  std::map<int64_t, std::shared_ptr<ModelVersion>> old;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = models_.find(name);
    if (it == models_.end() || it->second.versions.empty())
      throw ServeError(Status::NotFound, "model '" + name + "' is not loaded");
    it->second.state = ModelState::Unloading;
    old.swap(it->second.versions);
  }
  old.clear();  // the last reference frees the session; requests still running hold their own
  std::lock_guard<std::mutex> lk(mu_);
  models_[name].state = ModelState::Unavailable;
  models_[name].reason = "unloaded";
}

void Repository::unload_all() {
  std::vector<std::string> names;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& [n, e] : models_)
      if (!e.versions.empty()) names.push_back(n);
  }
  for (auto& n : names) {
    try {
      unload(n);
    } catch (const ServeError&) {
    }
  }
}

std::shared_ptr<ModelVersion> Repository::get(const std::string& name, const std::string& version) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = models_.find(name);
  if (it == models_.end()) {
    bool exists = false;
    try {
      validate_model_name(name);
      std::error_code ec;
      exists = fs::is_directory(fs::path(dir_) / name, ec);
    } catch (const ServeError&) {
    }
    throw ServeError(Status::NotFound, "unknown model '" + name.substr(0, 255) + "'" + (exists ? " (in the repository but not loaded)" : ""));
  }
  const Entry& e = it->second;
  if (e.state == ModelState::Loading) throw ServeError(Status::Unavailable, "model '" + name + "' is loading");
  if (e.versions.empty())
    throw ServeError(Status::NotFound, "model '" + name + "' is not loaded (" + model_state_name(e.state) +
                                           (e.reason.empty() ? "" : ": " + e.reason) + ")");
  if (version.empty()) return e.versions.rbegin()->second;
  int64_t v = -1;
  if (!version.empty() && version.size() <= 18 && std::all_of(version.begin(), version.end(), ::isdigit)) v = std::stoll(version);
  auto vit = e.versions.find(v);
  if (vit == e.versions.end())
    throw ServeError(Status::NotFound, "model '" + name + "' has no loaded version '" + version.substr(0, 64) + "'");
  return vit->second;
}

bool Repository::ready(const std::string& name, const std::string& version) const {
  try {
    return get(name, version) != nullptr;
  } catch (const ServeError& e) {
    if (e.status == Status::NotFound) throw;
    return false;
  }
}

std::vector<std::string> Repository::versions(const std::string& name) const {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<std::string> out;
  auto it = models_.find(name);
  if (it != models_.end())
    for (auto& [v, mv] : it->second.versions) out.push_back(mv->version());
  return out;
}

std::vector<ModelIndexEntry> Repository::index(bool ready_only) const {
  std::vector<ModelIndexEntry> out;
  std::vector<std::string> names = scan();
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& [n, e] : models_)
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  std::sort(names.begin(), names.end());
  for (const auto& n : names) {
    auto it = models_.find(n);
    if (it == models_.end()) {
      if (!ready_only) out.push_back({n, "", "UNAVAILABLE", "not loaded"});
      continue;
    }
    const Entry& e = it->second;
    if (e.versions.empty()) {
      if (!ready_only) out.push_back({n, "", model_state_name(e.state), e.reason});
      continue;
    }
    for (auto& [v, mv] : e.versions) out.push_back({n, mv->version(), model_state_name(e.state), e.reason});
  }
  return out;
}

bool Repository::all_ready() const {
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& [n, e] : models_)
    if (e.state == ModelState::Loading) return false;
  return true;
}

uint64_t Repository::accounted_bytes() const {
  std::lock_guard<std::mutex> lk(mu_);
  uint64_t n = 0;
  for (auto& [name, e] : models_)
    for (auto& [v, mv] : e.versions) n += mv->accounted_bytes();
  return n;
}

void Repository::write_metrics(std::string& out) const {
  std::vector<std::shared_ptr<ModelVersion>> all;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& [n, e] : models_)
      for (auto& [v, mv] : e.versions) all.push_back(mv);
  }
  auto labels = [](const ModelVersion& mv) {
    return "model=\"" + label_escape(mv.name()) + "\",version=\"" + mv.version() + "\"";
  };
  metric_header(out, "basalt_requests_total", "counter", "Inference requests by model, protocol and status code.");
  for (auto& mv : all) mv->metrics().requests.write(out, labels(*mv));
  const std::pair<const char*, Histogram ModelMetrics::*> hists[] = {
      {"basalt_request_queue_seconds", &ModelMetrics::queue},
      {"basalt_request_compute_seconds", &ModelMetrics::compute},
      {"basalt_request_duration_seconds", &ModelMetrics::total}};
  const char* help[] = {"Time requests waited in the model's queue.", "Time of the model run that answered a request.",
                        "Time from the request's arrival to its answer."};
  for (size_t i = 0; i < 3; ++i) {
    metric_header(out, hists[i].first, "histogram", help[i]);
    for (auto& mv : all) ((mv->metrics()).*(hists[i].second)).write(out, hists[i].first, labels(*mv));
  }
  metric_header(out, "basalt_batch_size", "histogram", "Requests answered by one model run (dynamic batching).");
  for (auto& mv : all) mv->metrics().write_batches(out, labels(*mv));
  metric_header(out, "basalt_queue_depth", "gauge", "Requests waiting in the model's queue.");
  for (auto& mv : all) out += "basalt_queue_depth{" + labels(*mv) + "} " + std::to_string(mv->queue_depth()) + "\n";
  metric_header(out, "basalt_inflight_requests", "gauge", "Requests being run now.");
  for (auto& mv : all) out += "basalt_inflight_requests{" + labels(*mv) + "} " + std::to_string(mv->in_flight()) + "\n";
  const std::pair<const char*, uint64_t MemoryStats::*> mem[] = {
      {"basalt_model_weights_bytes", &MemoryStats::weights_bytes},
      {"basalt_model_packed_weights_bytes", &MemoryStats::packed_weights_bytes},
      {"basalt_model_arena_bytes", &MemoryStats::arena_bytes},
      {"basalt_model_peak_run_bytes", &MemoryStats::peak_run_bytes},
      {"basalt_plan_cache_entries", &MemoryStats::plan_cache_entries},
      {"basalt_plan_cache_bytes", &MemoryStats::plan_cache_bytes},
      {"basalt_plan_cache_hits_total", &MemoryStats::plan_cache_hits},
      {"basalt_plan_cache_misses_total", &MemoryStats::plan_cache_misses},
      {"basalt_plan_cache_evictions_total", &MemoryStats::plan_cache_evictions}};
  std::vector<MemoryStats> stats;
  for (auto& mv : all) stats.push_back(mv->session().memory_stats());
  for (const auto& [metric, field] : mem) {
    std::string n = metric;
    bool counter = n.size() > 6 && n.compare(n.size() - 6, 6, "_total") == 0;
    metric_header(out, metric, counter ? "counter" : "gauge", "Session memory figure (docs/memory.md).");
    for (size_t i = 0; i < all.size(); ++i) out += n + "{" + labels(*all[i]) + "} " + std::to_string(stats[i].*field) + "\n";
  }
  metric_header(out, "basalt_model_accounted_bytes", "gauge", "Bytes the memory budget counts for the model.");
  for (auto& mv : all) out += "basalt_model_accounted_bytes{" + labels(*mv) + "} " + std::to_string(mv->accounted_bytes()) + "\n";
}

}  // namespace basalt::serve
