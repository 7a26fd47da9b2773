// The server's request and response in protocol-neutral form (docs/serving.md).
//
// The REST (rest.cpp) and gRPC (grpc_frontend.cpp) front ends turn the Open Inference Protocol's
// messages into an InferRequest, the model repository (repository.hpp) runs it, and the front end
// turns the InferResponse back into its own wire form. Failures are a ServeError whose Status
// each front end maps to its own code (HTTP 400/404/413/503, gRPC INVALID_ARGUMENT/...).
#pragma once

#include <basalt/basalt.hpp>

#include <stdexcept>
#include <string>
#include <vector>

namespace basalt::serve {

enum class Status {
  BadRequest,     // HTTP 400, gRPC INVALID_ARGUMENT: the request is malformed or does not fit the model
  NotFound,       // 404, NOT_FOUND: unknown model, version, output or route
  TooLarge,       // 413, RESOURCE_EXHAUSTED: body, tensor or element count over a limit
  Unavailable,    // 503, UNAVAILABLE: model not ready, queue full, server draining, too many connections
  Unauthorized,   // 401, UNAUTHENTICATED: missing or wrong bearer token
  Internal,       // 500, INTERNAL: a bug
};

struct ServeError : std::runtime_error {
  Status status;
  ServeError(Status s, const std::string& msg) : std::runtime_error(msg), status(s) {}
};

int http_status(Status s);
const char* status_name(Status s);

// The protocol's tensor datatypes ("FP32", "INT64", "BYTES", ...) and basalt's dtypes. A name the
// protocol does not define is a BadRequest naming it; a dtype it cannot carry (complex, float8,
// 4-bit) is Unsupported at model load (ModelVersion checks every input and output).
DType dtype_from_datatype(const std::string& datatype);
const char* datatype_of(DType dt);  // nullptr when the protocol has no name for it

// A tensor from raw little-endian bytes (the binary extension, gRPC raw contents): the size must
// be exactly numel * element size; BYTES elements are each a 4-byte little-endian length and
// that many bytes. Errors name the tensor.
Tensor tensor_from_raw(const std::string& name, DType dt, const Shape& shape, const char* data, size_t n);
// Appends the raw form of `t` to out.
void append_raw(const Tensor& t, std::string& out);
size_t raw_size(const Tensor& t);
// Checks a request shape (dims >= 0, element count within max_elements) and returns its numel.
int64_t checked_numel(const std::string& name, const Shape& shape, int64_t max_elements);

struct InferInput {
  std::string name;
  Tensor tensor;
};
struct RequestedOutput {
  std::string name;
  bool binary = false;  // REST: answer this output in the binary extension
};
struct InferRequest {
  std::string model, version, id;
  std::vector<InferInput> inputs;
  std::vector<RequestedOutput> outputs;  // empty = every output
  bool binary_outputs = false;           // REST: parameters.binary_data_output
};
struct InferOutput {
  std::string name;
  Tensor tensor;
  bool binary = false;
};
struct InferResponse {
  std::string model, version, id;
  std::vector<InferOutput> outputs;
};

}  // namespace basalt::serve
