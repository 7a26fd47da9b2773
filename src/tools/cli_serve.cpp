// `basalt serve --model-repository DIR [options]`: the Open Inference Protocol server
// (src/serve/, docs/serving.md). Exit codes: 0 after a clean drain on SIGTERM / SIGINT, 1 when
// the server cannot start or requests were still running at the drain deadline, 2 bad usage.
#include "serve/server.hpp"
#include "tools/cli.hpp"

#include <cstdio>

namespace basalt {

int cmd_serve(const std::vector<std::string>& args) {
  serve::ServeOptions o;
  o.limits.thread_budget = serve::cpu_budget();
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--model-repository" || a == "--model-store") o.repository = next_value(args, i);
    else if (a == "--http-port") o.http_port = int(parse_int_arg(a, next_value(args, i), -1));
    else if (a == "--grpc-port") o.grpc_port = int(parse_int_arg(a, next_value(args, i), -1));
    else if (a == "--host") o.host = next_value(args, i);
    else if (a == "--no-load") o.load_all = false;
    else if (a == "--model") o.models.push_back(next_value(args, i));
    else if (a == "--threads") o.limits.thread_budget = int(parse_int_arg(a, next_value(args, i), 1));
    else if (a == "--memory-budget") o.limits.memory_budget = uint64_t(parse_int_arg(a, next_value(args, i), 0));
    else if (a == "--max-tensor-elements") o.limits.max_tensor_elements = parse_int_arg(a, next_value(args, i), 1);
    else if (a == "--max-body-bytes") o.max_body_bytes = size_t(parse_int_arg(a, next_value(args, i), 1024));
    else if (a == "--max-header-bytes") o.max_header_bytes = size_t(parse_int_arg(a, next_value(args, i), 1024));
    else if (a == "--max-connections") o.max_connections = int(parse_int_arg(a, next_value(args, i), 1));
    else if (a == "--idle-timeout") o.idle_timeout_s = int(parse_int_arg(a, next_value(args, i), 1));
    else if (a == "--drain-timeout") o.drain_timeout_s = int(parse_int_arg(a, next_value(args, i), 0));
    else if (a == "--tls-cert") o.tls_cert = next_value(args, i);
    else if (a == "--tls-key") o.tls_key = next_value(args, i);
    else if (a == "--token-file") o.token_file = next_value(args, i);
    else if (a == "--access-log") o.access_log = true;
    else throw UsageError("unknown option '" + a + "'");
  }
  if (o.repository.empty()) throw UsageError("needs --model-repository DIR");
  if (o.http_port > 65535 || o.grpc_port > 65535) throw UsageError("ports are at most 65535");
  try {
    return serve::run_server(o);
  } catch (const serve::ServeError& e) {
    std::fprintf(stderr, "basalt serve: error: %s\n", e.what());
    return 1;
  }
}

}  // namespace basalt
