// libFuzzer target: the server's request decoders (src/serve/): REST JSON bodies, REST bodies with
// the binary tensor extension, and gRPC ModelInferRequest protobufs. First byte: which decoder
// (mod 3); for the binary extension, the next two bytes are the JSON header's length. Every
// input must decode or throw serve::ServeError; nothing else (a crash, another exception, a
// sanitizer report) is allowed.
#include "serve/grpc_frontend.hpp"
#include "serve/rest.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace basalt::serve;
  if (size < 1) return 0;
  int mode = data[0] % 3;
  const int64_t max_elements = int64_t(1) << 20;
  try {
    if (mode == 2) {
      InferRequest r = decode_model_infer_bytes(std::string(reinterpret_cast<const char*>(data + 1), size - 1), max_elements);
      (void)r;
      return 0;
    }
    RestRequest req;
    req.method = "POST";
    size_t off = 1;
    if (mode == 1 && size >= 3) {
      req.has_header_length = true;
      req.header_length = size_t(data[1]) | size_t(data[2]) << 8;
      off = 3;
    }
    req.body.assign(reinterpret_cast<const char*>(data + off), size - off);
    InferRequest r = parse_infer_request(req, max_elements);
    // Whatever decoded must encode back (the response writer sees the same tensors).
    InferResponse resp;
    for (auto& in : r.inputs) resp.outputs.push_back({in.name, in.tensor, in.name.size() % 2 == 1});
    RestReply out;
    write_infer_response(resp, out);
  } catch (const ServeError&) {
  }
  return 0;
}
