// The Open Inference Protocol over gRPC: inference.GRPCInferenceService (proto/grpc_predict_v2.proto)
// on gRPC's synchronous server (docs/serving.md). raw_input_contents and typed contents are both
// read; outputs are answered in raw_output_contents, as Triton and KServe servers do.
#pragma once

#include "serve/server.hpp"

#include <memory>

namespace basalt::serve {

// Parses and decodes serialized ModelInferRequest bytes (the fuzz target tests/fuzz/fuzz_serve.cpp).
InferRequest decode_model_infer_bytes(const std::string& bytes, int64_t max_elements);

class GrpcFrontend {
 public:
  explicit GrpcFrontend(ServerCore& core);  // binds host:grpc_port
  ~GrpcFrontend();
  int port() const { return port_; }
  // Stops taking RPCs; those running get until the deadline.
  void shutdown(int deadline_s);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace basalt::serve
