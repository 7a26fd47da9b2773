"""A small Open Inference Protocol (KServe v2) client for `basalt serve` (docs/serving.md).

    from basalt.client import HttpClient, GrpcClient
    c = HttpClient("127.0.0.1:8000")            # REST; binary=True uses the binary tensor extension
    out = c.infer("det", {"x": image})          # {output name: numpy array}
    g = GrpcClient("127.0.0.1:8001")            # gRPC (needs python3-grpcio; the stubs are built)
    out = g.infer("det", {"x": image})

Both speak the protocol exactly, so they work against any v2 server (KServe, Triton, Seldon MLServer).
Errors raise ClientError with the server's status and message.
"""
import http.client
import json
import ssl as _ssl

import numpy as np

_DATATYPES = {
    "BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32, "UINT64": np.uint64,
    "INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT64": np.int64, "FP16": np.float16,
    "FP32": np.float32, "FP64": np.float64, "BYTES": np.object_,
}


def datatype_of(array):
    a = np.asarray(array)
    if a.dtype.kind in "OSU":
        return "BYTES"
    for name, dt in _DATATYPES.items():
        if dt is not np.object_ and a.dtype == np.dtype(dt):
            return name
    raise ValueError(f"no protocol datatype for numpy dtype {a.dtype}")


def to_raw(array):
    """The protocol's raw bytes of an array (BYTES: 4-byte little-endian length + bytes each)."""
    a = np.asarray(array)
    if datatype_of(a) != "BYTES":
        return np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
    parts = []
    for item in a.reshape(-1):
        b = item if isinstance(item, bytes) else str(item).encode()
        parts.append(len(b).to_bytes(4, "little") + b)
    return b"".join(parts)


def from_raw(datatype, shape, raw):
    if datatype == "BYTES":
        items, pos = [], 0
        while pos < len(raw):
            n = int.from_bytes(raw[pos:pos + 4], "little")
            items.append(raw[pos + 4:pos + 4 + n])
            pos += 4 + n
        return np.array(items, dtype=np.object_).reshape(shape)
    return np.frombuffer(raw, dtype=np.dtype(_DATATYPES[datatype]).newbyteorder("<")).reshape(shape).copy()


class ClientError(Exception):
    def __init__(self, status, message):
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


class HttpClient:
    """REST: JSON tensors, or the binary tensor data extension (binary=True, the default)."""

    def __init__(self, url="127.0.0.1:8000", token=None, timeout=120, ssl_context=None):
        host, _, port = url.rpartition(":")
        self._args = (host, int(port))
        self._timeout = timeout
        self._ssl = ssl_context
        self._token = token
        self._conn = None

    def _connection(self):
        if self._conn is None:
            if self._ssl is not None:
                self._conn = http.client.HTTPSConnection(*self._args, timeout=self._timeout, context=self._ssl)
            else:
                self._conn = http.client.HTTPConnection(*self._args, timeout=self._timeout)
        return self._conn

    def request(self, method, path, body=None, headers=None):
        """One request; returns (status, headers dict, body bytes). Reconnects once if the server closed."""
        h = dict(headers or {})
        if self._token:
            h["Authorization"] = f"Bearer {self._token}"
        for attempt in range(2):
            try:
                c = self._connection()
                c.request(method, path, body=body, headers=h)
                r = c.getresponse()
                data = r.read()
                if r.getheader("Connection", "").lower() == "close":
                    self.close()
                return r.status, {k.lower(): v for k, v in r.getheaders()}, data
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.close()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def close(self):
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _json(self, method, path, body=None, ok=(200,)):
        status, _, data = self.request(method, path, body=None if body is None else json.dumps(body))
        doc = json.loads(data) if data else {}
        if status not in ok:
            raise ClientError(status, doc.get("error", data.decode(errors="replace")) if isinstance(doc, dict) else data)
        return doc

    def live(self):
        return self._json("GET", "/v2/health/live").get("live", False)

    def ready(self):
        status, _, _ = self.request("GET", "/v2/health/ready")
        return status == 200

    def server_metadata(self):
        return self._json("GET", "/v2")

    @staticmethod
    def _model_path(model, version):
        return f"/v2/models/{model}" + (f"/versions/{version}" if version else "")

    def model_metadata(self, model, version=None):
        return self._json("GET", self._model_path(model, version))

    def model_ready(self, model, version=None):
        return self._json("GET", self._model_path(model, version) + "/ready", ok=(200, 503)).get("ready", False)

    def index(self, ready=False):
        return self._json("POST", "/v2/repository/index", {"ready": ready})

    def load(self, model):
        self._json("POST", f"/v2/repository/models/{model}/load")

    def unload(self, model):
        self._json("POST", f"/v2/repository/models/{model}/unload")

    def infer(self, model, inputs, outputs=None, binary=True, version=None, request_id=None):
        body, headers = encode_rest_request(inputs, outputs, binary, request_id)
        status, h, data = self.request("POST", self._model_path(model, version) + "/infer", body, headers)
        if status != 200:
            raise ClientError(status, json.loads(data).get("error", ""))
        return decode_rest_response(h, data)


def encode_rest_request(inputs, outputs=None, binary=True, request_id=None):
    doc, blobs = {"inputs": []}, []
    if request_id is not None:
        doc["id"] = request_id
    for name, value in inputs.items():
        a = np.asarray(value)
        t = {"name": name, "shape": list(a.shape), "datatype": datatype_of(a)}
        if binary:
            raw = to_raw(a)
            t["parameters"] = {"binary_data_size": len(raw)}
            blobs.append(raw)
        elif t["datatype"] == "BYTES":
            t["data"] = [x.decode() if isinstance(x, bytes) else str(x) for x in a.reshape(-1)]
        else:
            t["data"] = a.reshape(-1).tolist()
        doc["inputs"].append(t)
    if outputs:
        doc["outputs"] = [{"name": n, "parameters": {"binary_data": binary}} for n in outputs]
    else:
        doc["parameters"] = {"binary_data_output": binary}
    head = json.dumps(doc).encode()
    headers = {"Content-Type": "application/json"}
    if binary:
        headers = {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(head))}
    return head + b"".join(blobs), headers


def decode_rest_response(headers, data):
    n = int(headers.get("inference-header-content-length", len(data)))
    doc = json.loads(data[:n])
    pos, out = n, {}
    for o in doc["outputs"]:
        size = o.get("parameters", {}).get("binary_data_size")
        if size is not None:
            out[o["name"]] = from_raw(o["datatype"], o["shape"], data[pos:pos + size])
            pos += size
        elif o["datatype"] == "BYTES":
            out[o["name"]] = np.array([s.encode() for s in o["data"]], dtype=np.object_).reshape(o["shape"])
        else:
            out[o["name"]] = np.array(o["data"], dtype=_DATATYPES[o["datatype"]]).reshape(o["shape"])
    return out


class GrpcClient:
    """gRPC: inference.GRPCInferenceService with raw_input_contents / raw_output_contents."""

    def __init__(self, url="127.0.0.1:8001", token=None, root_certificates=None, timeout=120):
        import grpc
        from . import grpc_predict_v2_pb2 as pb
        self.pb, self._grpc, self._timeout = pb, grpc, timeout
        opts = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
        if root_certificates is not None:
            self._channel = grpc.secure_channel(url, grpc.ssl_channel_credentials(root_certificates), options=opts)
        else:
            self._channel = grpc.insecure_channel(url, options=opts)
        self._metadata = [("authorization", f"Bearer {token}")] if token else None
        self._stubs = {}

    def call(self, method, request):
        """Calls /inference.GRPCInferenceService/<method>; raises ClientError(code name, details)."""
        resp_type = getattr(self.pb, method + "Response")
        if method not in self._stubs:
            self._stubs[method] = self._channel.unary_unary(
                f"/inference.GRPCInferenceService/{method}",
                request_serializer=lambda m: m.SerializeToString(), response_deserializer=resp_type.FromString)
        try:
            return self._stubs[method](request, timeout=self._timeout, metadata=self._metadata)
        except self._grpc.RpcError as e:
            raise ClientError(e.code().name, e.details()) from None

    def live(self):
        return self.call("ServerLive", self.pb.ServerLiveRequest()).live

    def ready(self):
        return self.call("ServerReady", self.pb.ServerReadyRequest()).ready

    def server_metadata(self):
        return self.call("ServerMetadata", self.pb.ServerMetadataRequest())

    def model_metadata(self, model, version=""):
        return self.call("ModelMetadata", self.pb.ModelMetadataRequest(name=model, version=version))

    def model_ready(self, model, version=""):
        return self.call("ModelReady", self.pb.ModelReadyRequest(name=model, version=version)).ready

    def index(self, ready=False):
        return self.call("RepositoryIndex", self.pb.RepositoryIndexRequest(ready=ready)).models

    def load(self, model):
        self.call("RepositoryModelLoad", self.pb.RepositoryModelLoadRequest(model_name=model))

    def unload(self, model):
        self.call("RepositoryModelUnload", self.pb.RepositoryModelUnloadRequest(model_name=model))

    def make_request(self, model, inputs, outputs=None, version="", request_id=""):
        req = self.pb.ModelInferRequest(model_name=model, model_version=version, id=request_id)
        for name, value in inputs.items():
            a = np.asarray(value)
            t = req.inputs.add()
            t.name, t.datatype = name, datatype_of(a)
            t.shape.extend(a.shape)
            req.raw_input_contents.append(to_raw(a))
        for n in outputs or []:
            req.outputs.add().name = n
        return req

    def infer(self, model, inputs, outputs=None, version="", request_id=""):
        resp = self.call("ModelInfer", self.make_request(model, inputs, outputs, version, request_id))
        return {o.name: from_raw(o.datatype, list(o.shape), resp.raw_output_contents[i])
                for i, o in enumerate(resp.outputs)}
