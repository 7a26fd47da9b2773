// REST routes, JSON tensors and the binary tensor data extension (see rest.hpp).
#include "serve/rest.hpp"

#include "core/json_text.hpp"

#include <simdjson.h>

#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

namespace basalt::serve {

std::string error_json(const std::string& message) {
  std::string s = "{\"error\":";
  append_json_string(s, message);
  s += "}";
  return s;
}

namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;

[[noreturn]] void bad(const std::string& msg) { throw ServeError(Status::BadRequest, msg); }

// Counts the scalars of `data` (flat or nested arrays) into `out` through `put`.
template <class Put>
void flatten(element e, int depth, Put& put) {
  if (e.type() == element_type::ARRAY) {
    if (depth > 64) bad("\"data\" nests arrays deeper than 64");
    for (element x : e.get_array()) flatten(x, depth + 1, put);
  } else {
    put(e);
  }
}

template <class T>
T int_value(element e, const std::string& name, int64_t index) {
  if constexpr (std::is_same_v<T, uint64_t>) {
    auto u = e.get_uint64();
    if (u.error()) bad("input '" + name + "': element " + std::to_string(index) + " is not an unsigned 64-bit integer");
    return u.value();
  } else {
    auto v = e.get_int64();
    if (v.error()) {
      if (e.type() == element_type::BOOL) return T(e.get_bool().value());
      bad("input '" + name + "': element " + std::to_string(index) + " is not an integer");
    }
    int64_t x = v.value();
    if (x < int64_t(std::numeric_limits<T>::min()) || (x > 0 && uint64_t(x) > uint64_t(std::numeric_limits<T>::max())))
      bad("input '" + name + "': element " + std::to_string(index) + " (" + std::to_string(x) + ") is out of range");
    return T(x);
  }
}

double float_value(element e, const std::string& name, int64_t index) {
  auto d = e.get_double();
  if (!d.error()) return d.value();
  if (e.type() == element_type::STRING) {  // "NaN", "Infinity", "-Infinity" as strings
    std::string_view s = e.get_string().value();
    if (s == "NaN" || s == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (s == "Infinity" || s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-Infinity" || s == "-inf") return -std::numeric_limits<double>::infinity();
  }
  bad("input '" + name + "': element " + std::to_string(index) + " is not a number");
}

Tensor tensor_from_json(const std::string& name, DType dt, const Shape& shape, element data) {
  int64_t numel = shape_numel(shape);
  Tensor t = dt == DType::String ? Tensor(dt, shape) : Tensor::uninit(dt, shape);
  int64_t i = 0;
  auto put = [&](element e) {
    if (i >= numel) {
      ++i;
      return;
    }
    switch (dt) {
      case DType::Bool: {
        auto b = e.get_bool();
        if (b.error()) bad("input '" + name + "': element " + std::to_string(i) + " is not true or false");
        t.data<uint8_t>()[i] = b.value();
        break;
      }
      case DType::Uint8: t.data<uint8_t>()[i] = int_value<uint8_t>(e, name, i); break;
      case DType::Uint16: t.data<uint16_t>()[i] = int_value<uint16_t>(e, name, i); break;
      case DType::Uint32: t.data<uint32_t>()[i] = int_value<uint32_t>(e, name, i); break;
      case DType::Uint64: t.data<uint64_t>()[i] = int_value<uint64_t>(e, name, i); break;
      case DType::Int8: t.data<int8_t>()[i] = int_value<int8_t>(e, name, i); break;
      case DType::Int16: t.data<int16_t>()[i] = int_value<int16_t>(e, name, i); break;
      case DType::Int32: t.data<int32_t>()[i] = int_value<int32_t>(e, name, i); break;
      case DType::Int64: t.data<int64_t>()[i] = int_value<int64_t>(e, name, i); break;
      case DType::Float: t.data<float>()[i] = float(float_value(e, name, i)); break;
      case DType::Double: t.data<double>()[i] = float_value(e, name, i); break;
      case DType::Float16: t.data<uint16_t>()[i] = float_to_half_bits(float(float_value(e, name, i))); break;
      case DType::BFloat16: t.data<uint16_t>()[i] = float_to_bf16_bits(float(float_value(e, name, i))); break;
      case DType::String: {
        auto s = e.get_string();
        if (s.error()) bad("input '" + name + "': BYTES element " + std::to_string(i) + " is not a string");
        t.data<std::string>()[i] = std::string(s.value());
        break;
      }
      default: bad("input '" + name + "': datatype not supported in JSON");
    }
    ++i;
  };
  flatten(data, 0, put);
  if (i != numel)
    bad("input '" + name + "': \"data\" has " + std::to_string(i) + " elements, but shape " + shape_str(shape) +
        " needs " + std::to_string(numel));
  return t;
}

bool bool_param(element obj, const char* key, bool& value) {
  auto params = obj["parameters"];
  if (params.error()) return false;
  if (params.type() != element_type::OBJECT) bad("\"parameters\" must be an object");
  auto v = params[key];
  if (v.error()) return false;
  auto b = v.get_bool();
  if (b.error()) bad(std::string("parameter \"") + key + "\" must be true or false");
  value = b.value();
  return true;
}

std::string string_field(element obj, const char* key, const char* what) {
  auto v = obj[key];
  if (v.error()) bad(std::string(what) + " has no \"" + key + "\"");
  auto s = v.get_string();
  if (s.error()) bad(std::string(what) + ": \"" + key + "\" must be a string");
  return std::string(s.value());
}

}  // namespace

InferRequest parse_infer_request(const RestRequest& req, int64_t max_elements) {
  size_t json_len = req.body.size();
  if (req.has_header_length) {
    if (req.header_length > req.body.size())
      bad("Inference-Header-Content-Length " + std::to_string(req.header_length) + " is larger than the body (" +
          std::to_string(req.body.size()) + " bytes)");
    json_len = req.header_length;
  }
  thread_local simdjson::dom::parser parser;
  element doc;
  auto err = parser.parse(req.body.data(), json_len).get(doc);
  if (err) bad(std::string("malformed JSON: ") + simdjson::error_message(err));
  if (doc.type() != element_type::OBJECT) bad("the request must be a JSON object");
  InferRequest out;
  if (auto id = doc["id"]; !id.error()) {
    auto s = id.get_string();
    if (s.error()) bad("\"id\" must be a string");
    out.id = std::string(s.value());
  }
  bool_param(doc, "binary_data_output", out.binary_outputs);
  auto inputs = doc["inputs"];
  if (inputs.error() || inputs.type() != element_type::ARRAY) bad("the request needs \"inputs\", an array");
  size_t binary_pos = json_len;
  for (element in : inputs.get_array()) {
    if (in.type() != element_type::OBJECT) bad("each of \"inputs\" must be an object");
    std::string name = string_field(in, "name", "an input");
    std::string datatype = string_field(in, "datatype", ("input '" + name + "'").c_str());
    DType dt = dtype_from_datatype(datatype);
    auto sh = in["shape"];
    if (sh.error() || sh.type() != element_type::ARRAY) bad("input '" + name + "' needs \"shape\", an array of integers");
    Shape shape;
    for (element d : sh.get_array()) {
      auto v = d.get_int64();
      if (v.error()) bad("input '" + name + "': \"shape\" must hold integers");
      shape.push_back(v.value());
    }
    checked_numel(name, shape, max_elements);
    Tensor t;
    auto params = in["parameters"];
    auto bsize = params.error() ? params : params["binary_data_size"];
    if (!params.error() && params.type() != element_type::OBJECT) bad("input '" + name + "': \"parameters\" must be an object");
    if (!bsize.error()) {
      auto n = bsize.get_uint64();
      if (n.error()) bad("input '" + name + "': binary_data_size must be a non-negative integer");
      if (!in["data"].error()) bad("input '" + name + "' has both \"data\" and binary_data_size");
      if (!req.has_header_length)
        bad("input '" + name + "' has binary_data_size but the request has no Inference-Header-Content-Length");
      if (n.value() > req.body.size() - binary_pos)
        bad("input '" + name + "': binary_data_size " + std::to_string(n.value()) + " is more than the " +
            std::to_string(req.body.size() - binary_pos) + " bytes left after the JSON");
      t = tensor_from_raw(name, dt, shape, req.body.data() + binary_pos, size_t(n.value()));
      binary_pos += size_t(n.value());
    } else {
      auto data = in["data"];
      if (data.error()) bad("input '" + name + "' has neither \"data\" nor binary_data_size");
      t = tensor_from_json(name, dt, shape, data.value());
    }
    out.inputs.push_back({name, std::move(t)});
  }
  if (binary_pos != req.body.size())
    bad("the binary data sizes add up to " + std::to_string(binary_pos - json_len) + " bytes, but " +
        std::to_string(req.body.size() - json_len) + " follow the JSON");
  if (auto outs = doc["outputs"]; !outs.error()) {
    if (outs.type() != element_type::ARRAY) bad("\"outputs\" must be an array");
    for (element o : outs.get_array()) {
      if (o.type() != element_type::OBJECT) bad("each of \"outputs\" must be an object");
      RequestedOutput r;
      r.name = string_field(o, "name", "a requested output");
      r.binary = out.binary_outputs;
      bool_param(o, "binary_data", r.binary);
      for (const auto& prev : out.outputs)
        if (prev.name == r.name) bad("output '" + r.name + "' requested twice");
      out.outputs.push_back(std::move(r));
    }
  }
  return out;
}

namespace {

template <class T>
void append_number(std::string& out, T v) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(v)) return void(out += "NaN");
    if (std::isinf(v)) return void(out += v > 0 ? "Infinity" : "-Infinity");
  }
  char b[40];
  auto r = std::to_chars(b, b + sizeof b, v);
  out.append(b, r.ptr);
}

void append_json_data(std::string& out, const Tensor& t) {
  out += '[';
  int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    if (i) out += ',';
    switch (t.dtype()) {
      case DType::Bool: out += t.data<uint8_t>()[i] ? "true" : "false"; break;
      case DType::Uint8: append_number(out, unsigned(t.data<uint8_t>()[i])); break;
      case DType::Uint16: append_number(out, t.data<uint16_t>()[i]); break;
      case DType::Uint32: append_number(out, t.data<uint32_t>()[i]); break;
      case DType::Uint64: append_number(out, t.data<uint64_t>()[i]); break;
      case DType::Int8: append_number(out, int(t.data<int8_t>()[i])); break;
      case DType::Int16: append_number(out, t.data<int16_t>()[i]); break;
      case DType::Int32: append_number(out, t.data<int32_t>()[i]); break;
      case DType::Int64: append_number(out, t.data<int64_t>()[i]); break;
      case DType::Float: append_number(out, t.data<float>()[i]); break;
      case DType::Double: append_number(out, t.data<double>()[i]); break;
      case DType::Float16: append_number(out, half_bits_to_float(t.data<uint16_t>()[i])); break;
      case DType::BFloat16: append_number(out, bf16_bits_to_float(t.data<uint16_t>()[i])); break;
      case DType::String: append_json_string(out, t.data<std::string>()[i]); break;
      default: break;
    }
  }
  out += ']';
}

void append_shape(std::string& out, const Shape& s) {
  out += '[';
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ',';
    append_number(out, s[i]);
  }
  out += ']';
}

}  // namespace

void write_infer_response(const InferResponse& resp, RestReply& out) {
  std::string& j = out.body;
  j = "{\"model_name\":";
  append_json_string(j, resp.model);
  j += ",\"model_version\":";
  append_json_string(j, resp.version);
  if (!resp.id.empty()) {
    j += ",\"id\":";
    append_json_string(j, resp.id);
  }
  j += ",\"outputs\":[";
  bool any_binary = false;
  for (size_t i = 0; i < resp.outputs.size(); ++i) {
    const InferOutput& o = resp.outputs[i];
    if (i) j += ',';
    j += "{\"name\":";
    append_json_string(j, o.name);
    j += ",\"datatype\":\"";
    j += datatype_of(o.tensor.dtype());
    j += "\",\"shape\":";
    append_shape(j, o.tensor.shape());
    if (o.binary) {
      any_binary = true;
      j += ",\"parameters\":{\"binary_data_size\":";
      append_number(j, raw_size(o.tensor));
      j += "}}";
    } else {
      j += ",\"data\":";
      append_json_data(j, o.tensor);
      j += '}';
    }
  }
  j += "]}";
  if (any_binary) {
    out.has_header_length = true;
    out.header_length = j.size();
    out.content_type = "application/octet-stream";
    for (const auto& o : resp.outputs)
      if (o.binary) append_raw(o.tensor, j);
  }
}

namespace {

std::vector<std::string> split_path(const std::string& target) {
  std::string path = target.substr(0, target.find('?'));
  std::vector<std::string> parts;
  size_t i = 0;
  while (i < path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    if (j > i) parts.push_back(path.substr(i, j - i));
    i = j + 1;
  }
  return parts;
}

void append_tensor_meta(std::string& j, const std::vector<IoInfo>& ios) {
  j += '[';
  for (size_t i = 0; i < ios.size(); ++i) {
    if (i) j += ',';
    j += "{\"name\":";
    append_json_string(j, ios[i].name);
    j += ",\"datatype\":\"";
    j += datatype_of(ios[i].dtype) ? datatype_of(ios[i].dtype) : "BYTES";
    j += "\",\"shape\":";
    append_shape(j, ios[i].has_shape ? ios[i].shape : Shape{});
    j += '}';
  }
  j += ']';
}

std::string model_metadata_json(ServerCore& core, const ModelVersion& mv) {
  std::string j = "{\"name\":";
  append_json_string(j, mv.name());
  j += ",\"versions\":[";
  auto vs = core.repository().versions(mv.name());
  for (size_t i = 0; i < vs.size(); ++i) {
    if (i) j += ',';
    append_json_string(j, vs[i]);
  }
  j += "],\"platform\":\"onnxruntime_onnx\",\"inputs\":";
  append_tensor_meta(j, mv.session().inputs());
  j += ",\"outputs\":";
  append_tensor_meta(j, mv.session().outputs());
  j += '}';
  return j;
}

std::string server_metadata_json() {
  std::string j = "{\"name\":\"";
  j += ServerCore::kName;
  j += "\",\"version\":\"";
  j += ServerCore::version();
  j += "\",\"extensions\":[\"binary_tensor_data\",\"model_repository\",\"metrics\"]}";
  return j;
}

RestReply json_reply(int status, std::string body) {
  RestReply r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

bool body_bool(const std::string& body, const char* key, bool dflt) {
  if (body.find_first_not_of(" \t\r\n") == std::string::npos) return dflt;
  thread_local simdjson::dom::parser parser;
  element doc;
  if (parser.parse(body).get(doc) || doc.type() != element_type::OBJECT) bad("the body must be a JSON object");
  auto v = doc[key];
  if (v.error()) return dflt;
  auto b = v.get_bool();
  if (b.error()) bad(std::string("\"") + key + "\" must be true or false");
  return b.value();
}

}  // namespace

RestReply handle_rest(ServerCore& core, RestRequest& req) {
  auto parts = split_path(req.target);
  const bool get = req.method == "GET", post = req.method == "POST";
  RestReply r;
  std::string model, version;
  try {
    auto method_is = [&](bool ok) {
      if (!ok) throw ServeError(Status::NotFound, "method " + req.method + " not allowed on " + req.target.substr(0, 256));
    };
    if (parts.size() == 1 && parts[0] == "metrics") {
      method_is(get);
      r.status = 200;
      r.content_type = "text/plain; version=0.0.4";
      r.body = core.metrics_text();
      return r;
    }
    if (parts.empty() || parts[0] != "v2") throw ServeError(Status::NotFound, "no route " + req.target.substr(0, 256));
    if (parts.size() == 1) {
      method_is(get);
      return json_reply(200, server_metadata_json());
    }
    if (parts[1] == "health" && parts.size() == 3) {
      method_is(get);
      if (parts[2] == "live") return json_reply(200, "{\"live\":true}");
      if (parts[2] == "ready") {
        bool ok = core.ready();
        return json_reply(ok ? 200 : 503, ok ? "{\"ready\":true}" : "{\"ready\":false}");
      }
    }
    if (parts[1] == "repository") {
      method_is(post);
      core.authorize(req.authorization);
      if (parts.size() == 3 && parts[2] == "index") {
        bool ready_only = body_bool(req.body, "ready", false);
        std::string j = "[";
        auto idx = core.repository().index(ready_only);
        for (size_t i = 0; i < idx.size(); ++i) {
          if (i) j += ',';
          j += "{\"name\":";
          append_json_string(j, idx[i].name);
          if (!idx[i].version.empty()) {
            j += ",\"version\":";
            append_json_string(j, idx[i].version);
          }
          j += ",\"state\":\"" + idx[i].state + "\"";
          if (!idx[i].reason.empty()) {
            j += ",\"reason\":";
            append_json_string(j, idx[i].reason);
          }
          j += '}';
        }
        return json_reply(200, j + "]");
      }
      if (parts.size() == 5 && parts[2] == "models" && (parts[4] == "load" || parts[4] == "unload")) {
        model = parts[3];
        if (core.draining()) throw ServeError(Status::Unavailable, "the server is shutting down");
        if (parts[4] == "load")
          core.repository().load(model);
        else
          core.repository().unload(model);
        return json_reply(200, "{}");
      }
    }
    if (parts[1] == "models" && parts.size() >= 3) {
      model = parts[2];
      size_t k = 3;
      if (parts.size() >= 5 && parts[3] == "versions") version = parts[4], k = 5;
      std::string action = parts.size() > k ? parts[k] : "";
      if (parts.size() > k + 1) throw ServeError(Status::NotFound, "no route " + req.target.substr(0, 256));
      if (action.empty()) {
        method_is(get);
        auto mv = core.repository().get(model, version);
        return json_reply(200, model_metadata_json(core, *mv));
      }
      if (action == "ready") {
        method_is(get);
        bool ok = core.repository().ready(model, version);
        std::string j = "{\"name\":";
        append_json_string(j, model);
        j += ok ? ",\"ready\":true}" : ",\"ready\":false}";
        return json_reply(ok ? 200 : 503, j);
      }
      if (action == "infer") {
        method_is(post);
        core.authorize(req.authorization);
        InferRequest ir;
        try {
          ir = parse_infer_request(req, core.options().limits.max_tensor_elements);
        } catch (const ServeError& e) {
          core.count_failure(model, "http", http_status(e.status));
          throw;
        }
        ir.model = model;
        ir.version = version;
        InferResponse resp = core.infer(std::move(ir), "http");
        write_infer_response(resp, r);
        r.status = 200;
        return r;
      }
    }
    throw ServeError(Status::NotFound, "no route " + req.target.substr(0, 256));
  } catch (const ServeError& e) {
    return json_reply(http_status(e.status), error_json(e.what()));
  } catch (const std::exception& e) {
    return json_reply(500, error_json(std::string("internal error: ") + e.what()));
  }
}

}  // namespace basalt::serve
