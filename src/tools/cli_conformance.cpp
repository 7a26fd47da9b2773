// `basalt conformance`: runs ONNX backend test folders (model.onnx + test_data_set_*/) and
// compares like the ONNX runner. Each test runs in a forked child with a timeout, so a crash or
// hang in one test is reported as that test's failure and cannot take the whole run down.
#include "graph/model.hpp"
#include "tools/cli.hpp"
#include "tools/testdata.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <poll.h>
#include <sstream>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace basalt {
namespace fs = std::filesystem;

namespace {

struct ExpectedFailure {
  std::string reason;
  std::string path_contains;  // entry "test_name@SUBSTR" applies only when the test's path contains SUBSTR
};

void read_expected_file(const std::string& path, std::map<std::string, ExpectedFailure>& m) {
  std::ifstream f(path);
  if (!f) BASALT_THROW(Io, "cannot read expected-failure list '" + path + "'");
  std::string line;
  int ln = 0;
  while (std::getline(f, line)) {
    ++ln;
    auto b = line.find_first_not_of(" \t");
    if (b == std::string::npos || line[b] == '#') continue;
    auto e = line.find_first_of(" \t", b);
    std::string name = line.substr(b, e == std::string::npos ? std::string::npos : e - b);
    std::string reason;
    if (e != std::string::npos) {
      auto r = line.find_first_not_of(" \t", e);
      if (r != std::string::npos) reason = line.substr(r);
    }
    if (reason.empty())
      BASALT_THROW(InvalidArgument, path + ":" + std::to_string(ln) + ": expected failure '" + name + "' has no reason");
    std::string where;
    auto at = name.find('@');
    if (at != std::string::npos) {
      where = name.substr(at + 1);
      name = name.substr(0, at);
    }
    m[name + (where.empty() ? "" : "@" + where)] = {reason, where};
  }
}

// A file, or a folder of *.txt files (one per op group): lines "test_name  reason".
std::map<std::string, ExpectedFailure> read_expected(const std::string& path) {
  std::map<std::string, ExpectedFailure> m;
  if (fs::is_directory(path)) {
    std::vector<fs::path> files;
    for (auto& e : fs::directory_iterator(path))
      if (e.path().extension() == ".txt") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (auto& f : files) read_expected_file(f.string(), m);
  } else {
    read_expected_file(path, m);
  }
  return m;
}

// Runs one test folder in this process. Returns "" on pass, else the reason.
std::string run_test(const fs::path& dir) {
  auto session = Session::open((dir / "model.onnx").string());
  std::vector<fs::path> sets;
  for (auto& e : fs::directory_iterator(dir))
    if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) sets.push_back(e.path());
  std::sort(sets.begin(), sets.end());
  if (sets.empty()) return "no test_data_set_* folders";
  const auto& ins = session->inputs();
  // Test inputs map to the inputs without defaults, in order (as onnxruntime's backend does).
  std::vector<const IoInfo*> required;
  for (auto& io : ins)
    if (!io.has_default) required.push_back(&io);
  for (auto& set : sets) {
    std::vector<std::pair<std::string, Value>> feeds;
    size_t k = 0;
    for (;; ++k) {
      fs::path p = set / ("input_" + std::to_string(k) + ".pb");
      if (!fs::exists(p)) break;
      const IoInfo* io = k < required.size() ? required[k] : (k < ins.size() ? &ins[k] : nullptr);
      if (!io) return "test has more inputs than the model";
      Value v = read_pb_value(p.string(), io->kind, io->dtype);
      if (io->kind == "optional" && v.is_none()) continue;  // empty optional: leave unset
      feeds.emplace_back(io->name, std::move(v));
    }
    auto outs = session->run(feeds);
    for (size_t o = 0; o < outs.size(); ++o) {
      fs::path p = set / ("output_" + std::to_string(o) + ".pb");
      if (!fs::exists(p)) continue;
      Value want = read_pb_value(p.string(), session->outputs()[o].kind, session->outputs()[o].dtype);
      std::string diff = compare_values(outs[o], want, 1e-3, 1e-7);
      if (!diff.empty())
        return set.filename().string() + " output '" + session->outputs()[o].name + "': " + diff;
    }
  }
  return "";
}

std::string run_isolated(const fs::path& dir, double timeout_s) {
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) return "fork failed";
  if (pid == 0) {
    close(fds[0]);
    std::string r;
    try {
      r = run_test(dir);
      r = r.empty() ? "P" : "F" + r;
    } catch (const Error& e) {
      r = std::string("F") + e.what();
    } catch (const std::exception& e) {
      r = std::string("Funexpected exception: ") + e.what();
    }
    size_t off = 0;
    while (off < r.size()) {
      ssize_t w = write(fds[1], r.data() + off, r.size() - off);
      if (w <= 0) break;
      off += size_t(w);
    }
    close(fds[1]);
    _exit(0);
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  auto start = std::chrono::steady_clock::now();
  bool timed_out = false;
  for (;;) {
    struct pollfd p {fds[0], POLLIN, 0};
    double left = timeout_s - std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    int pr = poll(&p, 1, int(std::min(left, 1.0) * 1000) + 1);
    if (pr > 0) {
      ssize_t n = read(fds[0], buf, sizeof buf);
      if (n <= 0) break;
      out.append(buf, size_t(n));
    }
  }
  close(fds[0]);
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  if (timed_out) return "timed out after " + std::to_string(int(timeout_s)) + " s";
  if (WIFSIGNALED(status)) return "crashed with signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  if (out.empty()) return "child exited without a result";
  return out[0] == 'P' ? "" : out.substr(1);
}

}  // namespace

int cmd_conformance(const std::vector<std::string>& args, const char* argv0) {
  std::vector<std::string> paths;
  std::string json_path, expected_path, filter;
  bool run_expected = false, fork_tests = true, verbose = false;
  double timeout = 120;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--json") json_path = next_value(args, i);
    else if (a == "--expected-failures") expected_path = next_value(args, i);
    else if (a == "--filter") filter = next_value(args, i);
    else if (a == "--run-expected") run_expected = true;
    else if (a == "--no-fork") fork_tests = false;
    else if (a == "--verbose" || a == "-v") verbose = true;
    else if (a == "--timeout") timeout = std::stod(next_value(args, i));
    else if (!a.empty() && a[0] == '-') throw UsageError("unknown option '" + a + "'");
    else paths.push_back(a);
  }
  if (paths.empty()) throw UsageError("missing PATH (a folder of ONNX backend tests, or one test folder)");
  if (expected_path.empty()) {
    // Default: the list in the source tree next to the build folder.
    fs::path exe = fs::weakly_canonical(fs::path(argv0));
    fs::path cand = exe.parent_path().parent_path() / "tests" / "conformance" / "expected_failures";
    if (fs::exists(cand)) expected_path = cand.string();
  }
  std::map<std::string, ExpectedFailure> expected;
  if (!expected_path.empty()) expected = read_expected(expected_path);

  std::vector<fs::path> tests;
  for (auto& p : paths) {
    fs::path root(p);
    if (!fs::exists(root)) BASALT_THROW(Io, "'" + p + "' does not exist");
    if (fs::exists(root / "model.onnx")) {
      tests.push_back(root);
      continue;
    }
    std::vector<fs::path> found;
    for (auto& e : fs::directory_iterator(root))
      if (e.is_directory() && fs::exists(e.path() / "model.onnx")) found.push_back(e.path());
    if (found.empty()) BASALT_THROW(InvalidArgument, "'" + p + "' holds no ONNX backend tests (folders with model.onnx)");
    std::sort(found.begin(), found.end());
    tests.insert(tests.end(), found.begin(), found.end());
  }

  int passed = 0, failed = 0, skipped = 0;
  nlohmann::json results = nlohmann::json::array();
  auto t0 = std::chrono::steady_clock::now();
  for (auto& t : tests) {
    std::string name = t.filename().string();
    if (!filter.empty() && name.find(filter) == std::string::npos) continue;
    auto ex = expected.end();
    for (auto it = expected.lower_bound(name); it != expected.end() && it->first.rfind(name, 0) == 0; ++it) {
      if (it->first == name && ex == expected.end()) ex = it;
      if (it->first.size() > name.size() && it->first[name.size()] == '@' &&
          t.string().find(it->second.path_contains) != std::string::npos)
        ex = it;
    }
    if (ex != expected.end() && !run_expected) {
      ++skipped;
      if (verbose) std::printf("SKIP %s: %s\n", name.c_str(), ex->second.reason.c_str());
      results.push_back({{"name", name}, {"status", "skipped"}, {"reason", ex->second.reason}});
      continue;
    }
    std::string r;
    if (fork_tests) {
      r = run_isolated(t, timeout);
    } else {
      try {
        r = run_test(t);
      } catch (const Error& e) {
        r = e.what();
      }
    }
    std::replace(r.begin(), r.end(), '\n', ' ');
    if (r.empty()) {
      ++passed;
      if (ex != expected.end()) std::printf("XPASS %s: passes now; remove it from the expected-failure list\n", name.c_str());
      else if (verbose) std::printf("PASS %s\n", name.c_str());
      results.push_back({{"name", name}, {"status", "passed"}});
    } else if (ex != expected.end()) {
      ++skipped;
      if (verbose) std::printf("XFAIL %s: %s\n", name.c_str(), r.c_str());
      results.push_back({{"name", name}, {"status", "skipped"}, {"reason", ex->second.reason}, {"error", r}});
    } else {
      ++failed;
      std::printf("FAIL %s: %s\n", name.c_str(), r.c_str());
      results.push_back({{"name", name}, {"status", "failed"}, {"reason", r}});
    }
    std::fflush(stdout);
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!json_path.empty()) {
    nlohmann::json j = {{"passed", passed}, {"failed", failed}, {"skipped", skipped}, {"seconds", secs}, {"tests", results}};
    std::ofstream f(json_path);
    f << j.dump(1) << "\n";
  }
  std::printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  return failed ? 1 : 0;
}

}  // namespace basalt
