// The Open Inference Protocol over HTTP/REST: routes, JSON tensors and the binary tensor data
// extension (docs/serving.md). Transport-free (http_frontend.cpp feeds it), so the fuzz target
// tests/fuzz/fuzz_rest.cpp drives it directly.
#pragma once

#include "serve/server.hpp"

#include <string>
#include <utility>
#include <vector>

namespace basalt::serve {

struct RestRequest {
  std::string method, target, body;
  std::string authorization;
  bool has_header_length = false;  // Inference-Header-Content-Length
  size_t header_length = 0;
};

struct RestReply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  bool has_header_length = false;  // binary outputs follow the JSON
  size_t header_length = 0;
};

RestReply handle_rest(ServerCore& core, RestRequest& req);

// The JSON + binary body of an infer request into an InferRequest (model and version from the
// route). Throws ServeError naming what is wrong.
InferRequest parse_infer_request(const RestRequest& req, int64_t max_elements);
// The answer's JSON (+ binary outputs appended after it; sets has_header_length).
void write_infer_response(const InferResponse& resp, RestReply& out);
// {"error": "..."}
std::string error_json(const std::string& message);

}  // namespace basalt::serve
