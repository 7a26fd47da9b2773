// gRPC front end (see grpc_frontend.hpp).
#include "serve/grpc_frontend.hpp"

#include <grpc_predict_v2.grpc.pb.h>  // generated from src/serve/proto/ into the build tree

#include <grpcpp/grpcpp.h>
#include <grpcpp/resource_quota.h>

#include <chrono>
#include <fstream>
#include <sstream>

namespace basalt::serve {

namespace pb = ::inference;

static grpc::Status to_grpc(const ServeError& e) {
  grpc::StatusCode c = grpc::StatusCode::INTERNAL;
  switch (e.status) {
    case Status::BadRequest: c = grpc::StatusCode::INVALID_ARGUMENT; break;
    case Status::NotFound: c = grpc::StatusCode::NOT_FOUND; break;
    case Status::TooLarge: c = grpc::StatusCode::RESOURCE_EXHAUSTED; break;
    case Status::Unavailable: c = grpc::StatusCode::UNAVAILABLE; break;
    case Status::Unauthorized: c = grpc::StatusCode::UNAUTHENTICATED; break;
    case Status::Internal: c = grpc::StatusCode::INTERNAL; break;
  }
  return grpc::Status(c, e.what());
}

static std::string auth_of(grpc::ServerContext* ctx) {
  auto it = ctx->client_metadata().find("authorization");
  return it == ctx->client_metadata().end() ? std::string() : std::string(it->second.data(), it->second.size());
}

// Typed contents of one input into a tensor (the element count must match the shape).
static Tensor tensor_from_contents(const std::string& name, DType dt, const Shape& shape, const pb::InferTensorContents& c) {
  int64_t n = shape_numel(shape);
  auto check = [&](int64_t have) {
    if (have != n)
      throw ServeError(Status::BadRequest, "input '" + name + "': contents has " + std::to_string(have) +
                                               " elements, but shape " + shape_str(shape) + " needs " + std::to_string(n));
  };
  Tensor t = dt == DType::String ? Tensor(dt, shape) : Tensor::uninit(dt, shape);
  auto ints = [&](auto* dst, const auto& src, int64_t lo, int64_t hi) {
    check(src.size());
    for (int64_t i = 0; i < n; ++i) {
      int64_t v = int64_t(src[int(i)]);
      if (v < lo || v > hi) throw ServeError(Status::BadRequest, "input '" + name + "': element " + std::to_string(i) + " out of range");
      dst[i] = static_cast<std::remove_pointer_t<decltype(dst)>>(v);
    }
  };
  // Every element of `src`, converted to T (strings and bools included).
  auto copy_all = [&](auto* dst, const auto& src) {
    check(src.size());
    std::copy(src.begin(), src.end(), dst);
  };
  switch (dt) {
    case DType::Bool: copy_all(t.data<uint8_t>(), c.bool_contents()); break;
    case DType::Int8: ints(t.data<int8_t>(), c.int_contents(), -128, 127); break;
    case DType::Int16: ints(t.data<int16_t>(), c.int_contents(), -32768, 32767); break;
    case DType::Int32: ints(t.data<int32_t>(), c.int_contents(), INT32_MIN, INT32_MAX); break;
    case DType::Uint8: ints(t.data<uint8_t>(), c.uint_contents(), 0, 255); break;
    case DType::Uint16: ints(t.data<uint16_t>(), c.uint_contents(), 0, 65535); break;
    case DType::Uint32: ints(t.data<uint32_t>(), c.uint_contents(), 0, UINT32_MAX); break;
    case DType::Int64: copy_all(t.data<int64_t>(), c.int64_contents()); break;
    case DType::Uint64: copy_all(t.data<uint64_t>(), c.uint64_contents()); break;
    case DType::Float: copy_all(t.data<float>(), c.fp32_contents()); break;
    case DType::Double: copy_all(t.data<double>(), c.fp64_contents()); break;
    case DType::String: copy_all(t.data<std::string>(), c.bytes_contents()); break;
    default:
      throw ServeError(Status::BadRequest, "input '" + name + "': " + datatype_of(dt) +
                                               " has no typed contents field; send it in raw_input_contents");
  }
  return t;
}

// A ModelInferRequest into an InferRequest: raw_input_contents (one per input) or typed contents.
static InferRequest decode_model_infer(const pb::ModelInferRequest& q, int64_t max_el) {
  InferRequest req;
  req.model = q.model_name();
  req.version = q.model_version();
  req.id = q.id();
  bool raw = q.raw_input_contents_size() > 0;
  if (raw && q.raw_input_contents_size() != q.inputs_size())
    throw ServeError(Status::BadRequest, "raw_input_contents has " + std::to_string(q.raw_input_contents_size()) +
                                             " entries for " + std::to_string(q.inputs_size()) + " inputs");
  for (int i = 0; i < q.inputs_size(); ++i) {
    const auto& in = q.inputs(i);
    DType dt = dtype_from_datatype(in.datatype());
    Shape shape(in.shape().begin(), in.shape().end());
    checked_numel(in.name(), shape, max_el);
    Tensor t;
    if (raw) {
      if (in.has_contents())
        throw ServeError(Status::BadRequest, "input '" + in.name() + "' has contents, but the request uses raw_input_contents");
      const std::string& b = q.raw_input_contents(i);
      t = tensor_from_raw(in.name(), dt, shape, b.data(), b.size());
    } else {
      t = tensor_from_contents(in.name(), dt, shape, in.contents());
    }
    req.inputs.push_back({in.name(), std::move(t)});
  }
  for (const auto& o : q.outputs()) {
    for (const auto& prev : req.outputs)
      if (prev.name == o.name()) throw ServeError(Status::BadRequest, "output '" + o.name() + "' requested twice");
    req.outputs.push_back({o.name(), true});
  }
  return req;
}


InferRequest decode_model_infer_bytes(const std::string& bytes, int64_t max_elements) {
  pb::ModelInferRequest q;
  if (!q.ParseFromString(bytes)) throw ServeError(Status::BadRequest, "malformed ModelInferRequest protobuf");
  return decode_model_infer(q, max_elements);
}

class InferenceService final : public pb::GRPCInferenceService::Service {
 public:
  explicit InferenceService(ServerCore& core) : core_(core) {}

  grpc::Status ServerLive(grpc::ServerContext*, const pb::ServerLiveRequest*, pb::ServerLiveResponse* r) override {
    r->set_live(core_.live());
    return grpc::Status::OK;
  }
  grpc::Status ServerReady(grpc::ServerContext*, const pb::ServerReadyRequest*, pb::ServerReadyResponse* r) override {
    r->set_ready(core_.ready());
    return grpc::Status::OK;
  }
  grpc::Status ModelReady(grpc::ServerContext*, const pb::ModelReadyRequest* q, pb::ModelReadyResponse* r) override {
    return guarded([&] { r->set_ready(core_.repository().ready(q->name(), q->version())); });
  }
  grpc::Status ServerMetadata(grpc::ServerContext*, const pb::ServerMetadataRequest*, pb::ServerMetadataResponse* r) override {
    r->set_name(ServerCore::kName);
    r->set_version(ServerCore::version());
    for (const char* e : {"binary_tensor_data", "model_repository", "metrics"}) r->add_extensions(e);
    return grpc::Status::OK;
  }
  grpc::Status ModelMetadata(grpc::ServerContext*, const pb::ModelMetadataRequest* q, pb::ModelMetadataResponse* r) override {
    return guarded([&] {
      auto mv = core_.repository().get(q->name(), q->version());
      r->set_name(mv->name());
      for (auto& v : core_.repository().versions(mv->name())) r->add_versions(v);
      r->set_platform("onnxruntime_onnx");
      auto fill = [](const std::vector<IoInfo>& ios, auto add) {
        for (const auto& io : ios) {
          pb::ModelMetadataResponse::TensorMetadata* m = add();
          m->set_name(io.name);
          m->set_datatype(datatype_of(io.dtype) ? datatype_of(io.dtype) : "BYTES");
          if (io.has_shape)
            for (int64_t d : io.shape) m->add_shape(d);
        }
      };
      fill(mv->session().inputs(), [&] { return r->add_inputs(); });
      fill(mv->session().outputs(), [&] { return r->add_outputs(); });
    });
  }
  grpc::Status ModelInfer(grpc::ServerContext* ctx, const pb::ModelInferRequest* q, pb::ModelInferResponse* r) override {
    auto t0 = std::chrono::steady_clock::now();
    grpc::Status st = guarded([&] {
      core_.authorize(auth_of(ctx));
      InferRequest req;
      try {
        req = decode_model_infer(*q, core_.options().limits.max_tensor_elements);
      } catch (const ServeError& e) {
        core_.count_failure(q->model_name(), "grpc", http_status(e.status));
        throw;
      }
      InferResponse resp = core_.infer(std::move(req), "grpc");
      r->set_model_name(resp.model);
      r->set_model_version(resp.version);
      r->set_id(resp.id);
      for (auto& o : resp.outputs) {
        auto* out = r->add_outputs();
        out->set_name(o.name);
        out->set_datatype(datatype_of(o.tensor.dtype()));
        for (int64_t d : o.tensor.shape()) out->add_shape(d);
        std::string* raw = r->add_raw_output_contents();
        raw->reserve(raw_size(o.tensor));
        append_raw(o.tensor, *raw);
      }
    });
    if (core_.options().access_log)
      core_.log_access("grpc", "ModelInfer " + q->model_name().substr(0, 200), st.ok() ? 200 : int(st.error_code()),
                       size_t(q->ByteSizeLong()), st.ok() ? size_t(r->ByteSizeLong()) : 0,
                       std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return st;
  }
  grpc::Status RepositoryIndex(grpc::ServerContext* ctx, const pb::RepositoryIndexRequest* q, pb::RepositoryIndexResponse* r) override {
    return guarded([&] {
      core_.authorize(auth_of(ctx));
      for (const auto& e : core_.repository().index(q->ready())) {
        auto* m = r->add_models();
        m->set_name(e.name);
        m->set_version(e.version);
        m->set_state(e.state);
        m->set_reason(e.reason);
      }
    });
  }
  grpc::Status RepositoryModelLoad(grpc::ServerContext* ctx, const pb::RepositoryModelLoadRequest* q, pb::RepositoryModelLoadResponse*) override {
    return guarded([&] {
      core_.authorize(auth_of(ctx));
      if (core_.draining()) throw ServeError(Status::Unavailable, "the server is shutting down");
      core_.repository().load(q->model_name());
    });
  }
  grpc::Status RepositoryModelUnload(grpc::ServerContext* ctx, const pb::RepositoryModelUnloadRequest* q, pb::RepositoryModelUnloadResponse*) override {
    return guarded([&] {
      core_.authorize(auth_of(ctx));
      core_.repository().unload(q->model_name());
    });
  }

 private:
  template <class F>
  grpc::Status guarded(F&& f) {
    try {
      f();
      return grpc::Status::OK;
    } catch (const ServeError& e) {
      return to_grpc(e);
    } catch (const std::exception& e) {
      return grpc::Status(grpc::StatusCode::INTERNAL, std::string("internal error: ") + e.what());
    }
  }

  ServerCore& core_;
};

static std::string read_file(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw ServeError(Status::BadRequest, std::string(what) + " " + path + ": cannot read");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct GrpcFrontend::Impl {
  std::unique_ptr<InferenceService> service;
  std::unique_ptr<grpc::Server> server;
};

GrpcFrontend::GrpcFrontend(ServerCore& core) : impl_(std::make_unique<Impl>()) {
  const ServeOptions& o = core.options();
  impl_->service = std::make_unique<InferenceService>(core);
  grpc::ServerBuilder b;
  std::shared_ptr<grpc::ServerCredentials> creds;
  if (!o.tls_cert.empty()) {
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({read_file(o.tls_key, "--tls-key"), read_file(o.tls_cert, "--tls-cert")});
    creds = grpc::SslServerCredentials(ssl);
  } else {
    creds = grpc::InsecureServerCredentials();
  }
  std::string addr = (o.host.find(':') != std::string::npos ? "[" + o.host + "]" : o.host) + ":" + std::to_string(o.grpc_port);
  b.AddListeningPort(addr, creds, &port_);
  b.RegisterService(impl_->service.get());
  b.SetMaxReceiveMessageSize(int(std::min<size_t>(o.max_body_bytes, INT32_MAX)));
  b.SetMaxSendMessageSize(INT32_MAX);
  grpc::ResourceQuota quota("basalt");
  quota.SetMaxThreads(std::max(4, o.max_connections));
  b.SetResourceQuota(quota);
  impl_->server = b.BuildAndStart();
  if (!impl_->server || port_ == 0) throw ServeError(Status::BadRequest, "cannot listen on " + addr + " (gRPC)");
}

GrpcFrontend::~GrpcFrontend() { shutdown(0); }

void GrpcFrontend::shutdown(int deadline_s) {
  if (!impl_->server) return;
  impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(deadline_s));
  impl_->server->Wait();
  impl_->server.reset();
}

}  // namespace basalt::serve
