"""basalt serve: the Open Inference Protocol over REST (JSON and binary) and gRPC, checked endpoint
by endpoint against in-process runs of the same models (docs/serving.md, docs/testing.md)."""
import concurrent.futures as cf
import json
import os
import socket
import subprocess
import threading
import time

import numpy as np
import pytest

import basalt
from basalt.client import ClientError, GrpcClient, HttpClient, encode_rest_request
from conftest import MODELS, Server, make_repository

DET, CLS, VAD = "ppocr_v4_det.onnx", "ppocr_mobile_v2_cls.onnx", "silero_vad_v5.onnx"


@pytest.fixture(scope="module")
def server(tmp_module_dir):
    repo = make_repository(tmp_module_dir, {
        "det": (DET, None),
        "cls": (CLS, {"max_batch_size": 8, "max_queue_delay_us": 20000, "instances": 1}),
        "vad": (VAD, {"max_queue": 8}),
        "limited": (DET, {"memory_limit": 4 << 20}),
        "spare": (VAD, None),
    })
    s = Server(repo, "--model", "det", "--model", "cls", "--model", "vad", "--model", "limited")
    yield s
    assert s.stop() == 0


def session(name):
    return basalt.InferenceSession(os.path.join(MODELS, name))


def vad_inputs(seed=0):
    r = np.random.default_rng(seed)
    return {"input": r.standard_normal((1, 512)).astype(np.float32) * 0.1,
            "state": np.zeros((2, 1, 128), np.float32), "sr": np.array(16000, np.int64)}


def test_health_and_server_metadata(server):
    h, g = HttpClient(server.http), GrpcClient(server.grpc)
    assert h.live() and h.ready() and g.live() and g.ready()
    md = h.server_metadata()
    assert md["name"] == "basalt" and "binary_tensor_data" in md["extensions"] and "model_repository" in md["extensions"]
    gm = g.server_metadata()
    assert gm.name == "basalt" and list(gm.extensions) == md["extensions"]


def test_model_metadata_and_ready(server):
    h, g = HttpClient(server.http), GrpcClient(server.grpc)
    md = h.model_metadata("vad")
    assert md["name"] == "vad" and md["versions"] == ["1"]
    assert [(i["name"], i["datatype"], i["shape"]) for i in md["inputs"]] == [
        ("input", "FP32", [-1, -1]), ("state", "FP32", [2, -1, 128]), ("sr", "INT64", [])]
    assert h.model_metadata("vad", version="1") == md
    gm = g.model_metadata("vad")
    assert [i.name for i in gm.inputs] == ["input", "state", "sr"] and list(gm.inputs[1].shape) == [2, -1, 128]
    assert h.model_ready("det") and h.model_ready("det", "1") and g.model_ready("det")
    status, _, body = h.request("GET", "/v2/models/spare/ready")
    assert status == 404 and b"not loaded" in body


@pytest.mark.parametrize("hw", [(320, 320), (480, 640)])
def test_det_outputs_identical_to_in_process(server, hw):
    x = np.random.default_rng(1).random((1, 3) + hw, dtype=np.float32)
    (want,) = session(DET).run(None, {"x": x})
    h, g = HttpClient(server.http), GrpcClient(server.grpc)
    got_bin = h.infer("det", {"x": x}, binary=True)
    got_json = h.infer("det", {"x": x}, binary=False)
    got_grpc = g.infer("det", {"x": x})
    for got in (got_bin, got_json, got_grpc):
        (name,) = got
        assert got[name].dtype == np.float32 and got[name].shape == want.shape
        assert np.array_equal(got[name], want)


def test_vad_all_outputs_and_request_id(server):
    ins = vad_inputs(2)
    want = session(VAD).run(None, ins)
    h, g = HttpClient(server.http), GrpcClient(server.grpc)
    body, headers = encode_rest_request(ins, binary=False, request_id="req-42")
    status, _, data = h.request("POST", "/v2/models/vad/infer", body, headers)
    doc = json.loads(data)
    assert status == 200 and doc["id"] == "req-42" and doc["model_name"] == "vad" and doc["model_version"] == "1"
    assert [o["name"] for o in doc["outputs"]] == ["output", "stateN"]
    got = h.infer("vad", ins, outputs=["stateN"])
    assert list(got) == ["stateN"] and np.array_equal(got["stateN"], want[1])
    resp = g.call("ModelInfer", g.make_request("vad", ins, request_id="g-7"))
    assert resp.id == "g-7" and [o.name for o in resp.outputs] == ["output", "stateN"]
    gg = g.infer("vad", ins)
    assert np.array_equal(gg["output"], want[0]) and np.array_equal(gg["stateN"], want[1])


def test_nested_json_data_and_typed_grpc_contents(server):
    ins = vad_inputs(3)
    (want,) = session(VAD).run(["output"], ins)
    doc = {"inputs": [
        {"name": "input", "shape": [1, 512], "datatype": "FP32", "data": [ins["input"][0].tolist()]},
        {"name": "state", "shape": [2, 1, 128], "datatype": "FP32", "data": ins["state"].tolist()},
        {"name": "sr", "shape": [], "datatype": "INT64", "data": [16000]}],
        "outputs": [{"name": "output"}]}
    h = HttpClient(server.http)
    status, _, data = h.request("POST", "/v2/models/vad/infer", json.dumps(doc))
    assert status == 200
    assert np.array_equal(np.array(json.loads(data)["outputs"][0]["data"], np.float32).reshape(want.shape), want)
    g = GrpcClient(server.grpc)
    req = g.pb.ModelInferRequest(model_name="vad")
    for name, a in ins.items():
        t = req.inputs.add()
        t.name, t.datatype = name, "INT64" if a.dtype == np.int64 else "FP32"
        t.shape.extend(a.shape)
        if a.dtype == np.int64:
            t.contents.int64_contents.extend(a.reshape(-1).tolist())
        else:
            t.contents.fp32_contents.extend(a.reshape(-1).tolist())
    resp = g.call("ModelInfer", req)
    got = np.frombuffer(resp.raw_output_contents[0], np.float32).reshape(want.shape)
    assert np.array_equal(got, want)


def test_dynamic_batching_answers_each_request(server):
    r = np.random.default_rng(4)
    xs = [r.random((1, 3, 48, 192), dtype=np.float32) for _ in range(16)]
    s = session(CLS)
    wants = [s.run(None, {"x": x})[0] for x in xs]
    before = HttpClient(server.http).request("GET", "/metrics")[2].decode()

    def one(i):
        c = HttpClient(server.http) if i % 2 else GrpcClient(server.grpc)
        (out,) = c.infer("cls", {"x": xs[i]}).values()
        return out

    with cf.ThreadPoolExecutor(16) as ex:
        gots = list(ex.map(one, range(16)))
    for got, want in zip(gots, wants):
        assert got.shape == (1, 2)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    after = HttpClient(server.http).request("GET", "/metrics")[2].decode()

    def runs_and_requests(text):
        vals = {}
        for line in text.splitlines():
            for key in ("basalt_batch_size_sum", "basalt_batch_size_count"):
                if line.startswith(key + '{model="cls"'):
                    vals[key] = int(line.split()[-1])
        return vals.get("basalt_batch_size_count", 0), vals.get("basalt_batch_size_sum", 0)

    (r0, q0), (r1, q1) = runs_and_requests(before), runs_and_requests(after)
    assert q1 - q0 == 16
    assert r1 - r0 < 16, "concurrent requests were never batched"


def test_repository_index_load_unload(server):
    h, g = HttpClient(server.http), GrpcClient(server.grpc)
    idx = {m["name"]: m for m in h.index()}
    assert idx["det"]["state"] == "READY" and idx["spare"]["state"] == "UNAVAILABLE"
    assert {m["name"] for m in h.index(ready=True)} == {"det", "cls", "vad", "limited"}
    h.load("spare")
    assert h.model_ready("spare") and {m.name: m.state for m in g.index()}["spare"] == "READY"
    out = h.infer("spare", vad_inputs(5))
    assert out["output"].shape == (1, 1)
    g.unload("spare")
    assert {m["name"]: m["state"] for m in h.index()}["spare"] == "UNAVAILABLE"
    with pytest.raises(ClientError) as e:
        h.infer("spare", vad_inputs(5))
    assert e.value.status == 404
    g.load("spare")
    assert g.model_ready("spare")
    h.unload("spare")


def test_metrics_exposition(server):
    HttpClient(server.http).infer("vad", vad_inputs(6))
    status, headers, body = HttpClient(server.http).request("GET", "/metrics")
    text = body.decode()
    assert status == 200 and headers["content-type"].startswith("text/plain")
    for series in ("basalt_requests_total{model=\"vad\"", "basalt_request_queue_seconds_bucket{model=\"vad\"",
                   "basalt_request_compute_seconds_count{model=\"vad\"", "basalt_request_duration_seconds_sum",
                   "basalt_queue_depth{model=\"vad\"", "basalt_inflight_requests", "basalt_model_weights_bytes{model=\"det\"",
                   "basalt_model_arena_bytes", "basalt_plan_cache_hits_total", "basalt_plan_cache_evictions_total",
                   "process_resident_memory_bytes", "basalt_batch_size_bucket{model=\"cls\""):
        assert series in text, series
    ok = [l for l in text.splitlines() if l.startswith('basalt_requests_total{model="vad"') and 'code="200"' in l]
    assert ok and int(ok[0].split()[-1]) >= 1


def test_access_log(tmp_path):
    repo = make_repository(str(tmp_path), {"vad": (VAD, None)})
    s = Server(repo, "--access-log")
    HttpClient(s.http).infer("vad", vad_inputs(7))
    GrpcClient(s.grpc).infer("vad", vad_inputs(7))
    HttpClient(s.http).request("GET", "/v2/models/nosuch")
    assert s.stop() == 0
    lines = [json.loads(l) for l in s.stderr.splitlines() if l.startswith("{")]
    http_ok = [l for l in lines if l["protocol"] == "http" and l["request"] == "POST /v2/models/vad/infer"]
    assert http_ok and http_ok[0]["status"] == 200 and http_ok[0]["bytes_in"] > 2048 and http_ok[0]["ms"] > 0
    assert any(l["protocol"] == "grpc" and l["request"] == "ModelInfer vad" and l["status"] == 200 for l in lines)
    assert any(l["request"] == "GET /v2/models/nosuch" and l["status"] == 404 for l in lines)


def test_expect_100_continue(server):
    body, headers = encode_rest_request(vad_inputs(8), binary=True)
    s = socket.create_connection(("127.0.0.1", server.http_port), timeout=10)
    head = (f"POST /v2/models/vad/infer HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\nExpect: 100-continue\r\n"
            f"Inference-Header-Content-Length: {headers['Inference-Header-Content-Length']}\r\n\r\n")
    s.sendall(head.encode())
    first = s.recv(4096)
    assert first.startswith(b"HTTP/1.1 100 Continue"), first
    s.sendall(body)
    data = b""
    while b"\r\n\r\n" not in data:
        data += s.recv(65536)
    s.close()
    assert data.startswith(b"HTTP/1.1 200")
