// String ops: StringNormalizer, TfIdfVectorizer, StringConcat, StringSplit, RegexFullMatch.
#include "ops/common.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <numbers>
#include <random>
#include <regex>

namespace basalt {

namespace {

// Decode one UTF-8 code point at s[i]; returns the byte length (1 for invalid bytes, cp = byte).
size_t utf8_decode(const std::string& s, size_t i, uint32_t& cp) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  auto cont = [&](size_t k) { return i + k < s.size() && (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80; };
  auto cb = [&](size_t k) { return uint32_t(static_cast<unsigned char>(s[i + k]) & 0x3F); };
  if (c < 0x80) { cp = c; return 1; }
  if ((c & 0xE0) == 0xC0 && cont(1)) { cp = (uint32_t(c & 0x1F) << 6) | cb(1); return 2; }
  if ((c & 0xF0) == 0xE0 && cont(1) && cont(2)) { cp = (uint32_t(c & 0x0F) << 12) | (cb(1) << 6) | cb(2); return 3; }
  if ((c & 0xF8) == 0xF0 && cont(1) && cont(2) && cont(3)) {
    cp = (uint32_t(c & 0x07) << 18) | (cb(1) << 12) | (cb(2) << 6) | cb(3);
    return 4;
  }
  cp = 0xFFFFFFFFu;  // invalid: copied through as a raw byte
  return 1;
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) out += char(cp);
  else if (cp < 0x800) { out += char(0xC0 | (cp >> 6)); out += char(0x80 | (cp & 0x3F)); }
  else if (cp < 0x10000) { out += char(0xE0 | (cp >> 12)); out += char(0x80 | ((cp >> 6) & 0x3F)); out += char(0x80 | (cp & 0x3F)); }
  else { out += char(0xF0 | (cp >> 18)); out += char(0x80 | ((cp >> 12) & 0x3F)); out += char(0x80 | ((cp >> 6) & 0x3F)); out += char(0x80 | (cp & 0x3F)); }
}

// Simple case mapping: ASCII, Latin-1, Latin Extended-A, Greek, Cyrillic.
uint32_t to_lower_cp(uint32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c >= 0x100 && c <= 0x137) return c | 1;
  if (c >= 0x139 && c <= 0x148) return (c & 1) ? c + 1 : c;
  if (c >= 0x14A && c <= 0x177) return c | 1;
  if (c == 0x178) return 0xFF;
  if (c >= 0x179 && c <= 0x17E) return (c & 1) ? c + 1 : c;
  if (c >= 0x391 && c <= 0x3AB && c != 0x3A2) return c + 32;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}
uint32_t to_upper_cp(uint32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return c;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c >= 0x100 && c <= 0x137) return c & ~1u;
  if (c >= 0x139 && c <= 0x148) return (c & 1) ? c : c - 1;
  if (c >= 0x14A && c <= 0x177) return c & ~1u;
  if (c >= 0x179 && c <= 0x17E) return (c & 1) ? c : c - 1;
  if (c >= 0x3B1 && c <= 0x3CB && c != 0x3C2) return c - 32;
  if (c == 0x3C2) return 0x3A3;  // final sigma
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

std::string map_case(const std::string& s, bool upper) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    uint32_t cp;
    size_t len = utf8_decode(s, i, cp);
    if (cp == 0xFFFFFFFFu) out += s[i];
    else utf8_append(out, upper ? to_upper_cp(cp) : to_lower_cp(cp));
    i += len;
  }
  return out;
}

const std::string* string_data(const KernelContext& ctx, int input, const Tensor& t) {
  if (t.dtype() != DType::String) unsupported_dtype(ctx, input, t.dtype());
  return t.data<std::string>();
}

// Python str.split semantics.
std::vector<std::string> split_string(const std::string& s, const std::string& delim, int64_t maxsplit) {
  std::vector<std::string> parts;
  if (delim.empty()) {
    auto ws = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; };
    size_t i = 0;
    int64_t splits = 0;
    while (true) {
      while (i < s.size() && ws(s[i])) ++i;
      if (i >= s.size()) break;
      if (maxsplit >= 0 && splits >= maxsplit) {
        size_t e = s.size();
        while (e > i && ws(s[e - 1])) --e;
        parts.push_back(s.substr(i, e - i));
        break;
      }
      size_t j = i;
      while (j < s.size() && !ws(s[j])) ++j;
      parts.push_back(s.substr(i, j - i));
      ++splits;
      i = j;
    }
    return parts;
  }
  size_t start = 0;
  int64_t splits = 0;
  while (true) {
    if (maxsplit >= 0 && splits >= maxsplit) break;
    size_t p = s.find(delim, start);
    if (p == std::string::npos) break;
    parts.push_back(s.substr(start, p - start));
    start = p + delim.size();
    ++splits;
  }
  parts.push_back(s.substr(start));
  return parts;
}

// TfIdfVectorizer n-gram table.
template <class K>
struct NgramPool {
  std::map<std::vector<K>, int64_t> index;  // n-gram -> output column
};

template <class K>
void tfidf_count(const std::vector<K>& tokens, const NgramPool<K>& pool, int64_t min_n, int64_t max_n, int64_t max_skip,
                 std::vector<double>& counts) {
  int64_t L = int64_t(tokens.size());
  std::vector<K> key;
  for (int64_t n = min_n; n <= max_n; ++n) {
    for (int64_t start = 0; start < L; ++start) {
      int64_t skips = n == 1 ? 0 : max_skip;
      for (int64_t sk = 0; sk <= skips; ++sk) {
        int64_t last = start + (n - 1) * (sk + 1);
        if (last >= L) break;
        key.clear();
        for (int64_t j = 0; j < n; ++j) key.push_back(tokens[size_t(start + j * (sk + 1))]);
        auto it = pool.index.find(key);
        if (it != pool.index.end()) counts[size_t(it->second)] += 1.0;
      }
    }
  }
}

}  // namespace

static void register_stringnormalizer(OpRegistry& r) {
  // ---- StringNormalizer ----
  r.add("StringNormalizer", 10, [](const Node& n) {
    std::string action = n.attr_string("case_change_action", "NONE");
    if (action != "NONE" && action != "LOWER" && action != "UPPER")
      n.fail(ErrorCode::InvalidModel, "case_change_action must be NONE, LOWER or UPPER, got '" + action + "'");
    bool sensitive = n.attr_int("is_case_sensitive", 0) != 0;
    std::vector<std::string> stop = n.attr_strings("stopwords", {});
    if (!sensitive)
      for (auto& s : stop) s = map_case(s, false);
    return kernel([action, sensitive, stop](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      const std::string* p = string_data(ctx, 0, x);
      bool two_d = x.rank() == 2;
      if (!(x.rank() == 1 || (two_d && x.dim(0) == 1)))
        ctx.fail(ErrorCode::InvalidArgument, "input must have shape [C] or [1, C], got " + shape_str(x.shape()));
      std::vector<std::string> kept;
      for (int64_t i = 0; i < x.numel(); ++i) {
        const std::string& s = p[i];
        bool is_stop = false;
        if (!stop.empty()) {
          std::string cmp = sensitive ? s : map_case(s, false);
          is_stop = std::find(stop.begin(), stop.end(), cmp) != stop.end();
        }
        if (is_stop) continue;
        if (action == "LOWER") kept.push_back(map_case(s, false));
        else if (action == "UPPER") kept.push_back(map_case(s, true));
        else kept.push_back(s);
      }
      if (kept.empty()) kept.push_back("");
      int64_t c = int64_t(kept.size());
      Tensor& y = ctx.output(0, DType::String, two_d ? Shape{1, c} : Shape{c});
      std::string* q = y.data<std::string>();
      for (int64_t i = 0; i < c; ++i) q[i] = std::move(kept[size_t(i)]);
    });
  });
}

static void register_tfidfvectorizer(OpRegistry& r) {
  // ---- TfIdfVectorizer ----
  r.add("TfIdfVectorizer", 9, [](const Node& n) {
    int64_t max_n = n.attr_int("max_gram_length");
    int64_t min_n = n.attr_int("min_gram_length");
    int64_t max_skip = n.attr_int("max_skip_count");
    std::string mode = n.attr_string("mode");
    if (mode != "TF" && mode != "IDF" && mode != "TFIDF") n.fail(ErrorCode::InvalidModel, "mode must be TF, IDF or TFIDF, got '" + mode + "'");
    if (min_n < 1 || max_n < min_n) n.fail(ErrorCode::InvalidModel, "need 1 <= min_gram_length <= max_gram_length");
    if (max_skip < 0) n.fail(ErrorCode::InvalidModel, "max_skip_count must be >= 0");
    std::vector<int64_t> counts = n.attr_ints("ngram_counts");
    std::vector<int64_t> indexes = n.attr_ints("ngram_indexes");
    std::vector<float> weights = n.attr_floats("weights", {});
    bool str_pool = n.has_attr("pool_strings");
    if (str_pool == n.has_attr("pool_int64s")) n.fail(ErrorCode::InvalidModel, "exactly one of pool_strings and pool_int64s must be given");
    std::vector<std::string> spool = n.attr_strings("pool_strings", {});
    std::vector<int64_t> ipool = n.attr_ints("pool_int64s", {});
    int64_t pool_size = str_pool ? int64_t(spool.size()) : int64_t(ipool.size());
    if (!weights.empty() && weights.size() != indexes.size()) n.fail(ErrorCode::InvalidModel, "weights must have as many entries as ngram_indexes");
    int64_t n_out = 0;
    for (int64_t v : indexes) {
      if (v < 0) n.fail(ErrorCode::InvalidModel, "ngram_indexes must be >= 0");
      // (the output has max + 1 columns: its size is checked when the run allocates it)
      if (v == std::numeric_limits<int64_t>::max())
        n.fail(ErrorCode::InvalidModel, "ngram_indexes value " + std::to_string(v) + " is too large");
      n_out = std::max(n_out, v + 1);
    }
    NgramPool<std::string> sp;
    NgramPool<int64_t> ip;
    int64_t ngram_no = 0;
    for (size_t g = 0; g < counts.size(); ++g) {
      int64_t begin = counts[g], end = g + 1 < counts.size() ? counts[g + 1] : pool_size;
      int64_t len = int64_t(g) + 1;
      if (begin < 0 || end > pool_size || begin > end || (end - begin) % len != 0)
        n.fail(ErrorCode::InvalidModel, "ngram_counts is inconsistent with the pool size");
      for (int64_t p = begin; p < end; p += len, ++ngram_no) {
        if (ngram_no >= int64_t(indexes.size())) n.fail(ErrorCode::InvalidModel, "ngram_indexes has fewer entries than the pool has n-grams");
        int64_t col = indexes[size_t(ngram_no)];
        if (str_pool) sp.index[std::vector<std::string>(spool.begin() + p, spool.begin() + p + len)] = col;
        else ip.index[std::vector<int64_t>(ipool.begin() + p, ipool.begin() + p + len)] = col;
      }
    }
    // The pool's longest n-gram has ngram_counts.size() tokens: longer lengths can never match,
    // so scanning them is wasted work (max_gram_length = 2^62 would never finish).
    max_n = std::min<int64_t>(max_n, int64_t(counts.size()));
    // Weights of the columns that have one (a column's last entry wins), as (column, weight):
    // the output's width comes from the attribute values, so nothing of that size is made
    // before a run has allocated the output itself (a model whose ngram_indexes claim billions
    // of columns must not allocate gigabytes at load).
    std::vector<std::pair<int64_t, double>> colw;
    if (!weights.empty())
      for (size_t i = 0; i < indexes.size(); ++i) colw.emplace_back(indexes[i], weights[i]);
    return kernel([=](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      if (x.rank() != 1 && x.rank() != 2) ctx.fail(ErrorCode::InvalidArgument, "input must be 1-D or 2-D, got " + shape_str(x.shape()));
      if (str_pool != (x.dtype() == DType::String))
        ctx.fail(ErrorCode::InvalidArgument, std::string("input type ") + dtype_name(x.dtype()) + " does not match the pool type");
      if (!str_pool && x.dtype() != DType::Int32 && x.dtype() != DType::Int64) unsupported_dtype(ctx, 0, x.dtype());
      int64_t rows = x.rank() == 2 ? x.dim(0) : 1;
      int64_t cols = x.rank() == 2 ? x.dim(1) : (x.rank() == 1 ? x.dim(0) : 0);
      Tensor& y = ctx.output(0, DType::Float, x.rank() == 2 ? Shape{rows, n_out} : Shape{n_out});
      // An empty output (0 rows) passes the output's size check whatever n_out is: size nothing by it.
      if (y.numel() == 0) return;
      float* out = y.data<float>();
      std::vector<double> cnt(static_cast<size_t>(n_out));
      for (int64_t r0 = 0; r0 < rows; ++r0) {
        std::fill(cnt.begin(), cnt.end(), 0.0);
        if (str_pool) {
          const std::string* p = x.data<std::string>() + r0 * cols;
          std::vector<std::string> toks(p, p + cols);
          tfidf_count(toks, sp, min_n, max_n, max_skip, cnt);
        } else {
          std::vector<int64_t> toks(static_cast<size_t>(cols));
          for (int64_t i = 0; i < cols; ++i) toks[size_t(i)] = x.get_int(r0 * cols + i);
          tfidf_count(toks, ip, min_n, max_n, max_skip, cnt);
        }
        // Weight 1 unless the column has one.
        auto weighted = [&](int64_t c, double w) {
          double v = cnt[size_t(c)];
          if (mode == "IDF") v = v > 0 ? w : 0.0;
          else if (mode == "TFIDF") v = v * w;
          out[r0 * n_out + c] = float(v);
        };
        for (int64_t c = 0; c < n_out; ++c) weighted(c, 1.0);
        for (const auto& [c, w] : colw) weighted(c, w);
      }
    });
  });
}

static void register_stringconcat(OpRegistry& r) {
  // ---- StringConcat ----
  r.add("StringConcat", 20, [](const Node&) {
    return kernel([](KernelContext& ctx) {
      const Tensor& a = ctx.input(0);
      const Tensor& b = ctx.input(1);
      const std::string* pa = string_data(ctx, 0, a);
      const std::string* pb = string_data(ctx, 1, b);
      Shape os = broadcast_shapes(ctx, a.shape(), b.shape());
      std::vector<int64_t> st[2] = {broadcast_strides(a.shape(), os), broadcast_strides(b.shape(), os)};
      Tensor& y = ctx.output(0, DType::String, os);
      std::string* q = y.data<std::string>();
      for_each_broadcast(os, st, [&](int64_t i, const int64_t* off) { q[i] = pa[off[0]] + pb[off[1]]; });
    });
  });
}

static void register_stringsplit(OpRegistry& r) {
  // ---- StringSplit ----
  r.add("StringSplit", 20, [](const Node& n) {
    std::string delim = n.attr_string("delimiter", "");
    int64_t maxsplit = n.has_attr("maxsplit") ? n.attr_int("maxsplit") : -1;
    return kernel([delim, maxsplit](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      const std::string* p = string_data(ctx, 0, x);
      std::vector<std::vector<std::string>> parts(size_t(x.numel()));
      int64_t width = 0;
      for (int64_t i = 0; i < x.numel(); ++i) {
        parts[size_t(i)] = split_string(p[i], delim, maxsplit);
        width = std::max(width, int64_t(parts[size_t(i)].size()));
      }
      Shape ys = x.shape();
      ys.push_back(width);
      Tensor& y = ctx.output(0, DType::String, ys);
      std::string* q = y.data<std::string>();
      for (int64_t i = 0; i < x.numel(); ++i)
        for (size_t k = 0; k < parts[size_t(i)].size(); ++k) q[i * width + int64_t(k)] = parts[size_t(i)][k];
      if (ctx.has_output(1)) {
        Tensor& z = ctx.output(1, DType::Int64, x.shape());
        for (int64_t i = 0; i < x.numel(); ++i) z.data<int64_t>()[i] = int64_t(parts[size_t(i)].size());
      }
    });
  });
}

static void register_regexfullmatch(OpRegistry& r) {
  // ---- RegexFullMatch ----
  r.add("RegexFullMatch", 20, [](const Node& n) {
    std::string pattern = n.attr_string("pattern");
    // The spec uses RE2 syntax; translate the common RE2-only forms to ECMAScript: a leading (?i)
    // flag, named groups (?P<name>...) (names dropped), \A and \z anchors.
    auto flags = std::regex::ECMAScript;
    std::string pat = pattern;
    if (pat.rfind("(?i)", 0) == 0) {
      pat = pat.substr(4);
      flags |= std::regex::icase;
    }
    std::string tr;
    for (size_t i = 0; i < pat.size(); ++i) {
      if (pat[i] == '\\' && i + 1 < pat.size()) {
        if (pat[i + 1] == 'A') tr += '^';
        else if (pat[i + 1] == 'z') tr += '$';
        else { tr += pat[i]; tr += pat[i + 1]; }
        ++i;
      } else if (pat.compare(i, 4, "(?P<") == 0 && pat.find('>', i + 4) != std::string::npos) {
        tr += '(';
        i = pat.find('>', i + 4);
      } else {
        tr += pat[i];
      }
    }
    std::shared_ptr<const std::regex> re;
    try {
      re = std::make_shared<const std::regex>(tr, flags);
    } catch (const std::regex_error& e) {
      n.fail(ErrorCode::Unsupported, "pattern '" + pattern + "' is not supported: " + e.what());
    }
    return kernel([re](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      const std::string* p = string_data(ctx, 0, x);
      Tensor& y = ctx.output(0, DType::Bool, x.shape());
      for (int64_t i = 0; i < x.numel(); ++i) {
        try {
          y.data<bool>()[i] = std::regex_match(p[i], *re);
        } catch (const std::regex_error& e) {
          ctx.fail(ErrorCode::InvalidArgument, std::string("regex match failed on element ") + std::to_string(i) + ": " + e.what());
        }
      }
    });
  });
}

void register_string_ops(OpRegistry& r) {
  for (auto family : {register_stringnormalizer, register_tfidfvectorizer, register_stringconcat, register_stringsplit, register_regexfullmatch}) family(r);
  // What the planner and the optimizer know of these ops (ops/op_traits.hpp).
  for (const char* op : {"StringNormalizer", "StringSplit"}) r.def(op).data_dependent_shape();
  r.def("RegexFullMatch").infer_symbolic(shapes::same_bool);
  r.def("StringConcat").infer_symbolic(shapes::broadcast);
  r.def("TfIdfVectorizer").infer(shapes::tfidf_vectorizer);
}

}  // namespace basalt
