"""basalt serve under bad requests: each malformed case gets its documented status and message, and
the server keeps answering good requests (docs/serving.md: errors)."""
import json
import os
import signal
import socket
import ssl
import subprocess
import threading
import time

import numpy as np
import pytest

from basalt.client import ClientError, GrpcClient, HttpClient, encode_rest_request
from conftest import Server, make_repository

DET, VAD, CLS = "ppocr_v4_det.onnx", "silero_vad_v5.onnx", "ppocr_mobile_v2_cls.onnx"


def vad_doc(**over):
    doc = {"inputs": [
        {"name": "input", "shape": [1, 4], "datatype": "FP32", "data": [0.1, 0.2, 0.3, 0.4]},
        {"name": "state", "shape": [2, 1, 128], "datatype": "FP32", "data": [0.0] * 256},
        {"name": "sr", "shape": [], "datatype": "INT64", "data": [16000]}]}
    doc.update(over)
    return doc


@pytest.fixture(scope="module")
def server(tmp_module_dir):
    repo = make_repository(tmp_module_dir, {
        "vad": (VAD, None),
        "slow": (DET, {"max_queue": 1, "instances": 1}),
        "limited": (DET, {"memory_limit": 10 << 20}),
    })
    s = Server(repo, "--max-body-bytes", "16000000", "--max-connections", "64")
    yield s
    assert s.stop() == 0


def good(server):
    out = HttpClient(server.http).infer("vad", {"input": np.zeros((1, 512), np.float32),
                                                "state": np.zeros((2, 1, 128), np.float32), "sr": np.array(16000)})
    assert out["output"].shape == (1, 1)


REST_CASES = [
    # (name, path, body, headers, status, message part)
    ("malformed json", "/v2/models/vad/infer", b'{"inputs": [', {}, 400, "malformed JSON"),
    ("not an object", "/v2/models/vad/infer", b"[1,2]", {}, 400, "JSON object"),
    ("no inputs", "/v2/models/vad/infer", b"{}", {}, 400, '"inputs"'),
    ("unknown datatype", "/v2/models/vad/infer",
     json.dumps(vad_doc(inputs=[{"name": "input", "shape": [1], "datatype": "FLOAT", "data": [1]}])), {}, 400,
     "unknown datatype 'FLOAT'"),
    ("datatype mismatch", "/v2/models/vad/infer",
     json.dumps(vad_doc(inputs=vad_doc()["inputs"][:2] + [{"name": "sr", "shape": [], "datatype": "FP32", "data": [1.0]}])),
     {}, 400, "datatype FP32, but model 'vad' expects INT64"),
    ("count mismatch", "/v2/models/vad/infer",
     json.dumps(vad_doc(inputs=[{"name": "input", "shape": [1, 5], "datatype": "FP32", "data": [1, 2]}])), {}, 400,
     "has 2 elements, but shape [1,5] needs 5"),
    ("negative dim", "/v2/models/vad/infer",
     json.dumps(vad_doc(inputs=[{"name": "input", "shape": [1, -5], "datatype": "FP32", "data": []}])), {}, 400,
     "negative dimension"),
    ("huge shape", "/v2/models/vad/infer",
     json.dumps(vad_doc(inputs=[{"name": "input", "shape": [1 << 30, 1 << 30], "datatype": "FP32", "data": []}])), {},
     413, "elements"),
    ("wrong rank", "/v2/models/vad/infer",
     json.dumps(vad_doc(inputs=[{"name": "input", "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]}] +
                        vad_doc()["inputs"][1:])), {}, 400, "rank 1"),
    ("fixed dim", "/v2/models/vad/infer",
     json.dumps(vad_doc(inputs=vad_doc()["inputs"][:1] + [{"name": "state", "shape": [3, 1, 128], "datatype": "FP32",
                                                          "data": [0.0] * 384}] + vad_doc()["inputs"][2:])), {}, 400,
     "expects [2,-1,128]"),
    ("unknown input", "/v2/models/vad/infer",
     json.dumps(vad_doc(inputs=vad_doc()["inputs"] + [{"name": "bogus", "shape": [1], "datatype": "FP32", "data": [1]}])),
     {}, 400, "unknown input 'bogus'"),
    ("missing input", "/v2/models/vad/infer", json.dumps(vad_doc(inputs=vad_doc()["inputs"][:2])), {}, 400,
     "missing input 'sr'"),
    ("unknown output", "/v2/models/vad/infer", json.dumps(vad_doc(outputs=[{"name": "nope"}])), {}, 400,
     "unknown output 'nope'"),
    ("element not a number", "/v2/models/vad/infer",
     json.dumps(vad_doc(inputs=[{"name": "input", "shape": [1, 2], "datatype": "FP32", "data": [1, "x"]}])), {}, 400,
     "not a number"),
    ("int out of range", "/v2/models/vad/infer",
     json.dumps(vad_doc(inputs=[{"name": "input", "shape": [1], "datatype": "UINT8", "data": [300]}])), {}, 400,
     "out of range"),
    ("binary without header", "/v2/models/vad/infer",
     json.dumps(vad_doc(inputs=[{"name": "input", "shape": [1, 4], "datatype": "FP32",
                                 "parameters": {"binary_data_size": 16}}])), {}, 400,
     "no Inference-Header-Content-Length"),
    ("header length past body", "/v2/models/vad/infer", b"{}", {"Inference-Header-Content-Length": "99"}, 400,
     "larger than the body"),
    ("header length not a number", "/v2/models/vad/infer", b"{}", {"Inference-Header-Content-Length": "abc"}, 400,
     "not a byte count"),
    ("unknown model", "/v2/models/nosuch/infer", json.dumps(vad_doc()), {}, 404, "unknown model 'nosuch'"),
    ("unknown version", "/v2/models/vad/versions/7/infer", json.dumps(vad_doc()), {}, 404, "no loaded version '7'"),
    ("bad model name", "/v2/repository/models/..%2Fetc/load", b"", {}, 400, "invalid model name"),
    ("path traversal", "/v2/repository/models/../load", b"", {}, 400, "invalid model name '..'"),
    ("unknown route", "/v2/nothing", b"", {}, 404, "no route"),
    ("load unknown", "/v2/repository/models/ghost/load", b"", {}, 404, "no model 'ghost'"),
    ("unload not loaded", "/v2/repository/models/ghost/unload", b"", {}, 404, "not loaded"),
    ("body over limit", "/v2/models/vad/infer", b"x" * 17000000, {}, 413, "over the limit"),
]


@pytest.mark.parametrize("case", REST_CASES, ids=[c[0] for c in REST_CASES])
def test_rest_bad_request(server, case):
    name, path, body, headers, status, part = case
    c = HttpClient(server.http)
    method = "POST"
    got, _, data = c.request(method, path, body if isinstance(body, bytes) else body.encode(), headers)
    assert got == status, (got, data[:300])
    assert part in json.loads(data)["error"], data[:300]
    good(server)


def test_binary_sizes_that_do_not_add_up(server):
    ins = {"input": np.zeros((1, 4), np.float32), "state": np.zeros((2, 1, 128), np.float32), "sr": np.array(16000)}
    body, headers = encode_rest_request(ins, binary=True)
    c = HttpClient(server.http)
    status, _, data = c.request("POST", "/v2/models/vad/infer", body + b"extra", headers)
    assert status == 400 and b"add up" in data
    status, _, data = c.request("POST", "/v2/models/vad/infer", body[:-8], headers)
    assert status == 400 and b"bytes left after the JSON" in data
    good(server)


def test_malformed_http_and_raw_garbage(server):
    for junk in (b"GARBAGE\r\n\r\n", b"POST /v2/models/vad/infer HTTP/1.1\r\nContent-Length: -4\r\n\r\n",
                 b"\x16\x03\x01\x00\xa5\x01\x00\x00"):
        s = socket.create_connection(("127.0.0.1", server.http_port), timeout=10)
        s.sendall(junk)
        s.shutdown(socket.SHUT_WR)
        data = s.recv(4096)
        s.close()
        assert data == b"" or data.startswith(b"HTTP/1.1 400"), data[:100]
    good(server)


def test_memory_limit_gives_400_with_numbers_and_keeps_serving(server):
    x = np.zeros((1, 3, 640, 640), np.float32)
    with pytest.raises(ClientError) as e:
        HttpClient(server.http).infer("limited", {"x": x})
    assert e.value.status == 400 and "memory limit" in e.value.message and "bytes" in e.value.message
    out = HttpClient(server.http).infer("limited", {"x": np.zeros((1, 3, 32, 32), np.float32)})
    assert next(iter(out.values())).shape[-1] == 32
    good(server)


def test_full_queue_answers_503_at_once(server):
    x = np.random.default_rng(0).random((1, 3, 960, 960), dtype=np.float32)
    results = []

    def one():
        try:
            HttpClient(server.http).infer("slow", {"x": x})
            results.append(200)
        except ClientError as e:
            results.append((e.status, e.message))

    ts = [threading.Thread(target=one) for _ in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    full = [r for r in results if r != 200]
    assert results.count(200) >= 1
    assert full and all(r[0] == 503 and "queue full" in r[1] for r in full), results
    good(server)


GRPC_CASES = [
    ("unknown model", dict(model_name="nosuch"), "NOT_FOUND", "unknown model"),
    ("bad datatype", dict(model_name="vad", inputs=[dict(name="input", datatype="F32", shape=[1, 4])],
                          raw_input_contents=[b"\0" * 16]), "INVALID_ARGUMENT", "unknown datatype"),
    ("raw size", dict(model_name="vad", inputs=[dict(name="input", datatype="FP32", shape=[1, 4])],
                      raw_input_contents=[b"\0" * 15]), "INVALID_ARGUMENT", "15 bytes of data"),
    ("raw count", dict(model_name="vad", inputs=[dict(name="input", datatype="FP32", shape=[1, 4]),
                                                 dict(name="sr", datatype="INT64", shape=[])],
                       raw_input_contents=[b"\0" * 16]), "INVALID_ARGUMENT", "raw_input_contents has 1 entries"),
    ("typed count", dict(model_name="vad", inputs=[dict(name="input", datatype="FP32", shape=[1, 4],
                                                        contents=dict(fp32_contents=[1.0]))]),
     "INVALID_ARGUMENT", "contents has 1 elements"),
    ("huge", dict(model_name="vad", inputs=[dict(name="input", datatype="FP32", shape=[1 << 40])],
                  raw_input_contents=[b""]), "RESOURCE_EXHAUSTED", "elements"),
    ("unknown output", dict(model_name="vad", inputs=[dict(name="input", datatype="FP32", shape=[1, 4]),
                                                      dict(name="state", datatype="FP32", shape=[2, 1, 128]),
                                                      dict(name="sr", datatype="INT64", shape=[])],
                            raw_input_contents=[b"\0" * 16, b"\0" * 1024, b"\0" * 8], outputs=[dict(name="zz")]),
     "INVALID_ARGUMENT", "unknown output 'zz'"),
]


@pytest.mark.parametrize("case", GRPC_CASES, ids=[c[0] for c in GRPC_CASES])
def test_grpc_bad_request(server, case):
    name, fields, code, part = case
    g = GrpcClient(server.grpc)
    with pytest.raises(ClientError) as e:
        g.call("ModelInfer", g.pb.ModelInferRequest(**fields))
    assert e.value.status == code and part in e.value.message, e.value
    assert g.infer("vad", {"input": np.zeros((1, 512), np.float32), "state": np.zeros((2, 1, 128), np.float32),
                           "sr": np.array(16000)})["output"].shape == (1, 1)


def test_grpc_malformed_protobuf(server):
    import grpc
    ch = grpc.insecure_channel(server.grpc)
    call = ch.unary_unary("/inference.GRPCInferenceService/ModelInfer", request_serializer=lambda b: b,
                          response_deserializer=lambda b: b)
    with pytest.raises(grpc.RpcError) as e:
        call(b"\xff\xff\xff\xff\x0f\x12", timeout=10)
    assert e.value.code() in (grpc.StatusCode.INTERNAL, grpc.StatusCode.INVALID_ARGUMENT)
    good(server)


def test_too_many_connections(tmp_path):
    repo = make_repository(str(tmp_path), {"vad": (VAD, None)})
    s = Server(repo, "--max-connections", "2")
    try:
        held = [socket.create_connection(("127.0.0.1", s.http_port)) for _ in range(2)]
        time.sleep(0.3)
        c = socket.create_connection(("127.0.0.1", s.http_port), timeout=10)
        data = c.recv(4096)
        assert data.startswith(b"HTTP/1.1 503") and b"too many connections" in data
        for h in held:
            h.close()
        time.sleep(0.3)
        assert HttpClient(s.http).live()
        text = HttpClient(s.http).request("GET", "/metrics")[2].decode()
        assert "basalt_rejected_connections_total 1" in text
    finally:
        assert s.stop() == 0


def test_bearer_token(tmp_path):
    repo = make_repository(str(tmp_path / "r"), {"vad": (VAD, None)})
    tok = tmp_path / "token"
    tok.write_text("s3cret\n")
    s = Server(repo, "--token-file", str(tok))
    ins = {"input": np.zeros((1, 512), np.float32), "state": np.zeros((2, 1, 128), np.float32), "sr": np.array(16000)}
    try:
        assert HttpClient(s.http).live() and HttpClient(s.http).ready() and GrpcClient(s.grpc).live()
        for c in (HttpClient(s.http), HttpClient(s.http, token="wrong")):
            with pytest.raises(ClientError) as e:
                c.infer("vad", ins)
            assert e.value.status == 401 and "bearer token" in e.value.message
            with pytest.raises(ClientError) as e:
                c.index()
            assert e.value.status == 401
        with pytest.raises(ClientError) as e:
            GrpcClient(s.grpc).infer("vad", ins)
        assert e.value.status == "UNAUTHENTICATED"
        assert HttpClient(s.http, token="s3cret").infer("vad", ins)["output"].shape == (1, 1)
        assert GrpcClient(s.grpc, token="s3cret").infer("vad", ins)["output"].shape == (1, 1)
    finally:
        assert s.stop() == 0


def test_tls_on_both_endpoints(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    r = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                        str(cert), "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1"],
                       capture_output=True)
    assert r.returncode == 0, r.stderr
    repo = make_repository(str(tmp_path / "r"), {"vad": (VAD, None)})
    s = Server(repo, "--tls-cert", str(cert), "--tls-key", str(key))
    ins = {"input": np.zeros((1, 512), np.float32), "state": np.zeros((2, 1, 128), np.float32), "sr": np.array(16000)}
    try:
        ctx = ssl.create_default_context(cafile=str(cert))
        h = HttpClient(s.http, ssl_context=ctx)
        assert h.live() and h.infer("vad", ins)["output"].shape == (1, 1)
        g = GrpcClient(s.grpc, root_certificates=cert.read_bytes())
        assert g.live() and g.infer("vad", ins)["output"].shape == (1, 1)
        with pytest.raises(Exception):  # plain HTTP to a TLS port gets no HTTP answer
            HttpClient(s.http, timeout=5).live()
    finally:
        assert s.stop() == 0


def test_memory_budget_refuses_a_load_with_numbers(tmp_path):
    repo = make_repository(str(tmp_path), {"det": (DET, None), "vad": (VAD, None)})
    s = Server(repo, "--memory-budget", "6000000", "--no-load")
    try:
        h = HttpClient(s.http)
        h.load("vad")
        with pytest.raises(ClientError) as e:
            h.load("det")
        assert e.value.status == 400 and "memory budget of 6000000 bytes" in e.value.message and "needs" in e.value.message
        idx = {m["name"]: m for m in h.index()}
        assert idx["det"]["state"] == "UNAVAILABLE" and "budget" in idx["det"]["reason"]
        assert h.model_ready("vad")
    finally:
        assert s.stop() == 0


def test_bad_config_is_refused_with_its_key(tmp_path):
    repo = make_repository(str(tmp_path), {"a": (VAD, {"max_batch": 4}), "b": (VAD, {"max_batch_size": 4}),
                                           "c": (VAD, {"precision": "int4"})})
    s = Server(repo, "--no-load")
    try:
        h = HttpClient(s.http)
        for name, part in (("a", 'unknown key "max_batch"'), ("b", "free batch dimension"), ("c", '"precision"')):
            with pytest.raises(ClientError) as e:
                h.load(name)
            assert e.value.status == 400 and part in e.value.message, e.value.message
    finally:
        assert s.stop() == 0


def test_symlink_outside_repository_is_not_read(tmp_path):
    repo = tmp_path / "repo"
    (repo / "evil" / "1").mkdir(parents=True)
    outside = tmp_path / "outside.onnx"
    outside.write_bytes(b"not read")
    (repo / "evil" / "1" / "model.onnx").symlink_to(outside)
    s = Server(str(repo), "--no-load")
    try:
        with pytest.raises(ClientError) as e:
            HttpClient(s.http).load("evil")
        assert e.value.status == 400 and "outside the repository" in e.value.message
    finally:
        assert s.stop() == 0


def test_sigterm_drains_in_flight_requests(tmp_path):
    repo = make_repository(str(tmp_path), {"det": (DET, None)})
    s = Server(repo)
    x = np.random.default_rng(0).random((1, 3, 960, 960), dtype=np.float32)
    result = {}

    def one():
        try:
            result["out"] = HttpClient(s.http).infer("det", {"x": x})
        except Exception as e:  # noqa: BLE001
            result["err"] = e

    t = threading.Thread(target=one)
    t.start()
    # SIGTERM once the request is running (the server counts it in flight).
    probe = HttpClient(s.http)
    deadline = time.time() + 30
    while time.time() < deadline:
        text = probe.request("GET", "/metrics")[2].decode()
        if "basalt_server_inflight_requests 1" in text:
            break
        time.sleep(0.005)
    probe.close()
    rc = s.stop()
    t.join()
    assert rc == 0, s.stderr
    assert "out" in result, result
    assert "draining" in s.stderr and "0 requests unanswered" in s.stderr
