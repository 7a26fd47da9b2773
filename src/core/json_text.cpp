// JSON string literals (see json_text.hpp).
#include "core/json_text.hpp"

#include <cstdio>

namespace basalt {

void append_json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      out += b;
    } else {
      out += char(c);
    }
  }
  out += '"';
}

}  // namespace basalt
