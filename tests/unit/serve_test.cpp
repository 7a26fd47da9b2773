// The server's transport-free pieces (src/serve/): datatypes and raw bytes, the REST request
// decoder and response writer, model configs, the CPU budget. The protocol over sockets is
// tests/serve/ (docs/serving.md).
#include "serve/repository.hpp"
#include "serve/rest.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <string>

using namespace basalt;
using namespace basalt::serve;

namespace {

template <class F>
std::string error_of(F&& f, Status* status = nullptr) {
  try {
    f();
  } catch (const ServeError& e) {
    if (status) *status = e.status;
    return e.what();
  }
  return "";
}

InferRequest parse(const std::string& body, bool header = false, size_t header_len = 0) {
  RestRequest r;
  r.method = "POST";
  r.body = body;
  r.has_header_length = header;
  r.header_length = header_len;
  return parse_infer_request(r, 1 << 20);
}

}  // namespace

TEST(Serve, DatatypeNamesRoundTrip) {
  for (DType d : {DType::Bool, DType::Uint8, DType::Uint16, DType::Uint32, DType::Uint64, DType::Int8, DType::Int16,
                  DType::Int32, DType::Int64, DType::Float16, DType::Float, DType::Double, DType::BFloat16, DType::String})
    EXPECT_EQ(dtype_from_datatype(datatype_of(d)), d);
  EXPECT_EQ(datatype_of(DType::Complex64), nullptr);
  Status st;
  EXPECT_NE(error_of([] { dtype_from_datatype("float32"); }, &st).find("unknown datatype 'float32'"), std::string::npos);
  EXPECT_EQ(st, Status::BadRequest);
}

TEST(Serve, RawBytesAndStrings) {
  float v[3] = {1.5f, -2.f, 3.25f};
  Tensor t = tensor_from_raw("x", DType::Float, {3}, reinterpret_cast<const char*>(v), sizeof v);
  EXPECT_EQ(t.data<float>()[2], 3.25f);
  std::string raw;
  append_raw(t, raw);
  EXPECT_EQ(raw.size(), sizeof v);
  EXPECT_EQ(std::memcmp(raw.data(), v, sizeof v), 0);
  EXPECT_NE(error_of([&] { tensor_from_raw("x", DType::Float, {4}, raw.data(), raw.size()); }).find("needs 16"), std::string::npos);

  std::string bytes = std::string("\x02\0\0\0hi\0\0\0\0", 10);
  Tensor s = tensor_from_raw("s", DType::String, {2}, bytes.data(), bytes.size());
  EXPECT_EQ(s.data<std::string>()[0], "hi");
  EXPECT_EQ(s.data<std::string>()[1], "");
  std::string back;
  append_raw(s, back);
  EXPECT_EQ(back, bytes);
  EXPECT_EQ(raw_size(s), bytes.size());
  std::string lying = std::string("\xff\xff\xff\x7f" "ab", 6);
  EXPECT_NE(error_of([&] { tensor_from_raw("s", DType::String, {1}, lying.data(), lying.size()); }).find("only 2 remain"),
            std::string::npos);
  EXPECT_NE(error_of([&] { tensor_from_raw("s", DType::String, {3}, bytes.data(), bytes.size()); }).find("4-byte length"),
            std::string::npos);
  uint8_t b[2] = {0, 7};
  EXPECT_EQ(tensor_from_raw("b", DType::Bool, {2}, reinterpret_cast<const char*>(b), 2).data<uint8_t>()[1], 1);
}

TEST(Serve, ElementCountIsBoundedWithoutOverflow) {
  Status st;
  EXPECT_NE(error_of([] { checked_numel("x", {int64_t(1) << 40, int64_t(1) << 40}, 1 << 20); }, &st).find("more than"),
            std::string::npos);
  EXPECT_EQ(st, Status::TooLarge);
  EXPECT_NE(error_of([] { checked_numel("x", {2, -1}, 1 << 20); }).find("negative"), std::string::npos);
  EXPECT_EQ(checked_numel("x", {0, int64_t(1) << 62}, 16), 0);
  EXPECT_EQ(checked_numel("x", {}, 16), 1);
}

TEST(Serve, RestRequestJsonNestedAndTyped) {
  InferRequest r = parse(R"({"id":"a","inputs":[{"name":"x","shape":[2,2],"datatype":"INT8","data":[[1,-2],[3,4]]},
    {"name":"f","shape":[1],"datatype":"FP16","data":[0.5]},{"name":"s","shape":[2],"datatype":"BYTES","data":["p","q"]},
    {"name":"b","shape":[2],"datatype":"BOOL","data":[true,false]}],
    "outputs":[{"name":"y","parameters":{"binary_data":true}},{"name":"z"}]})");
  EXPECT_EQ(r.id, "a");
  ASSERT_EQ(r.inputs.size(), 4u);
  EXPECT_EQ(r.inputs[0].tensor.data<int8_t>()[1], -2);
  EXPECT_EQ(half_bits_to_float(r.inputs[1].tensor.data<uint16_t>()[0]), 0.5f);
  EXPECT_EQ(r.inputs[2].tensor.data<std::string>()[1], "q");
  EXPECT_EQ(r.inputs[3].tensor.data<uint8_t>()[0], 1);
  ASSERT_EQ(r.outputs.size(), 2u);
  EXPECT_TRUE(r.outputs[0].binary);
  EXPECT_FALSE(r.outputs[1].binary);
}

TEST(Serve, RestRequestBinaryExtension) {
  std::string head = R"({"inputs":[{"name":"x","shape":[2],"datatype":"FP32","parameters":{"binary_data_size":8}},
    {"name":"n","shape":[1],"datatype":"INT64","data":[5]}],"parameters":{"binary_data_output":true}})";
  float v[2] = {7.f, 8.f};
  std::string body = head + std::string(reinterpret_cast<const char*>(v), 8);
  InferRequest r = parse(body, true, head.size());
  EXPECT_EQ(r.inputs[0].tensor.data<float>()[1], 8.f);
  EXPECT_EQ(r.inputs[1].tensor.data<int64_t>()[0], 5);
  EXPECT_TRUE(r.binary_outputs);
  EXPECT_NE(error_of([&] { parse(body + "x", true, head.size()); }).find("add up"), std::string::npos);
  EXPECT_NE(error_of([&] { parse(body.substr(0, body.size() - 1), true, head.size()); }).find("bytes left after the JSON"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse(body, false); }).find("malformed JSON"), std::string::npos);
  EXPECT_NE(error_of([&] { parse(head, false); }).find("no Inference-Header-Content-Length"), std::string::npos);
}

TEST(Serve, RestRequestErrorsNameTheProblem) {
  const std::pair<const char*, const char*> cases[] = {
      {"[]", "JSON object"},
      {R"({"inputs":{}})", "\"inputs\", an array"},
      {R"({"inputs":[{"shape":[1],"datatype":"FP32","data":[1]}]})", "has no \"name\""},
      {R"({"inputs":[{"name":"x","shape":[1],"datatype":"FP32"}]})", "neither \"data\" nor binary_data_size"},
      {R"({"inputs":[{"name":"x","shape":[3],"datatype":"FP32","data":[1,2]}]})", "has 2 elements, but shape [3] needs 3"},
      {R"({"inputs":[{"name":"x","shape":[1],"datatype":"INT16","data":[70000]}]})", "out of range"},
      {R"({"inputs":[{"name":"x","shape":[1],"datatype":"UINT8","data":[-1]}]})", "out of range"},
      {R"({"inputs":[{"name":"x","shape":[1],"datatype":"BOOL","data":[1]}]})", "not true or false"},
      {R"({"inputs":[{"name":"x","shape":["a"],"datatype":"FP32","data":[1]}]})", "must hold integers"},
      {R"({"id":5,"inputs":[]})", "\"id\" must be a string"},
      {R"({"inputs":[],"outputs":[{"name":"y"},{"name":"y"}]})", "requested twice"},
  };
  for (const auto& c : cases) {
    const char *body = c.first, *part = c.second;
    Status st = Status::Internal;
    std::string msg = error_of([&] { parse(body); }, &st);
    EXPECT_NE(msg.find(part), std::string::npos) << body << " -> " << msg;
    EXPECT_EQ(st, Status::BadRequest) << body;
  }
}

TEST(Serve, ResponseFloatsReadBackExactly) {
  InferResponse resp;
  resp.model = "m", resp.version = "1", resp.id = "q\"1";
  Tensor t = Tensor::from_vector<float>({0.1f, 1e-30f, 3.4028235e38f, -0.f, std::numeric_limits<float>::quiet_NaN()});
  resp.outputs.push_back({"y", t, false});
  resp.outputs.push_back({"z", t, true});
  RestReply out;
  write_infer_response(resp, out);
  ASSERT_TRUE(out.has_header_length);
  std::string json = out.body.substr(0, out.header_length);
  EXPECT_NE(json.find(R"("id":"q\"1")"), std::string::npos);
  EXPECT_NE(json.find("[0.1,1e-30,3.4028235e+38,-0,NaN]"), std::string::npos) << json;
  EXPECT_NE(json.find(R"("binary_data_size":20)"), std::string::npos);
  EXPECT_EQ(out.body.size(), out.header_length + 20);
  EXPECT_EQ(std::memcmp(out.body.data() + out.header_length, t.raw(), 20), 0);
}

TEST(Serve, ModelConfigKeysAndErrors) {
  ModelConfig c = parse_model_config(R"({"instances":2,"max_batch_size":8,"max_queue_delay_us":500,"max_queue":3,
    "optimization_level":"basic","memory_limit":1000000,"version_policy":"all"})", "cfg", 2);
  EXPECT_EQ(c.instances, 2);
  EXPECT_EQ(c.max_batch_size, 8);
  EXPECT_EQ(c.max_queue_delay_us, 500);
  EXPECT_EQ(c.max_queue, 3);
  EXPECT_EQ(c.session.optimization_level, 1);
  EXPECT_EQ(c.session.memory_limit, 1000000u);
  EXPECT_TRUE(c.all_versions);
  EXPECT_TRUE(c.session.shared_pool);
  EXPECT_EQ(c.session.threads, 2);
  EXPECT_FALSE(parse_model_config(R"({"threads":3})", "cfg", 2).session.shared_pool);
  const std::pair<const char*, const char*> bad[] = {
      {"{", "not valid JSON"}, {"[]", "JSON object"}, {R"({"instances":0})", "\"instances\" must be an integer"},
      {R"({"max_batch":4})", "unknown key \"max_batch\""}, {R"({"precision":"int8"})", "\"precision\" must be"},
      {R"({"optimization_level":"max"})", "\"optimization_level\": unknown optimization level 'max'"}, {R"({"winograd":1})", "true or false"},
      {R"({"version_policy":"newest"})", "\"latest\" or \"all\""}};
  for (const auto& b : bad) {
    const char* text = b.first;
    EXPECT_NE(error_of([&] { parse_model_config(text, "cfg", 1); }).find(b.second), std::string::npos) << text;
  }
}

TEST(Serve, ModelNamesAndCpuBudget) {
  for (const char* ok : {"det", "ppocr-v4_det.1", "A9"}) EXPECT_EQ(error_of([&] { validate_model_name(ok); }), "");
  for (const char* bad : {"", ".", "..", "a/b", "a\\b", "x y", "%2e"})
    EXPECT_NE(error_of([&] { validate_model_name(bad); }).find("invalid model name"), std::string::npos) << bad;
  int n = cpu_budget();
  EXPECT_GE(n, 1);
  EXPECT_LE(n, int(std::thread::hardware_concurrency()));
}
