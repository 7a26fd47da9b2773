// Internal access to a Session, for the layers above it that see basalt's internals (the CLI, the
// Python module, the tests): the loaded model and the profiler. include/basalt/basalt.hpp shows
// neither type.
#pragma once

#include <basalt/basalt.hpp>

#include "graph/model.hpp"
#include "runtime/profiler.hpp"

#include <memory>

namespace basalt {

struct SessionAccess {
  static const Model& model(const Session& s);
  static Profiler* profiler(const Session& s);  // null when profiling is off
  static std::unique_ptr<Session> create(std::shared_ptr<Model> m, const SessionOptions& opts);
};

inline const Model& session_model(const Session& s) { return SessionAccess::model(s); }
inline Profiler* session_profiler(const Session& s) { return SessionAccess::profiler(s); }

}  // namespace basalt
