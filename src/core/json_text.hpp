// Writing JSON text by hand where a library would cost more than it gives (the profiler's traces,
// the server's responses): one string escaper for both.
#pragma once

#include <string>

namespace basalt {

// Appends `s` as a JSON string literal: quotes, with '"', '\\' and control characters escaped
// (\u00XX); other bytes are copied as they are (UTF-8 passes through).
void append_json_string(std::string& out, const std::string& s);

}  // namespace basalt
