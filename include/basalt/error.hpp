// basalt — one error mechanism for the whole runtime.
//
// Inside the library, failures are reported by throwing basalt::Error. The message carries
// context (node name, op type, input name) added where the failure is detected. The C API
// (later) catches Error at the boundary and turns it into a status; nothing else throws
// across it. A library never aborts on bad input.
#pragma once

#include <stdexcept>
#include <string>

namespace basalt {

enum class ErrorCode {
  InvalidModel = 1,     // the model file or graph is malformed
  InvalidArgument = 2,  // the caller's inputs/options are wrong (name, dtype, shape)
  Unsupported = 3,      // valid ONNX that basalt does not run (op, dtype, attribute value)
  MemoryLimit = 4,      // a request would exceed the session's memory limit
  Io = 5,               // file could not be read / mapped
  Internal = 6,         // a bug in basalt
  // 7 is the C API's BASALT_STATUS_OUT_OF_MEMORY
  Cancelled = 8,        // the caller stopped the run (RunOptions::terminate)
};

const char* error_code_name(ErrorCode c);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& msg) : std::runtime_error(msg), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace basalt

// Throw with a formatted message; the message should name what is wrong.
#define BASALT_THROW(code, msg) throw ::basalt::Error(::basalt::ErrorCode::code, (msg))
#define BASALT_CHECK(cond, code, msg)            \
  do {                                           \
    if (!(cond)) BASALT_THROW(code, (msg));      \
  } while (0)
