"""basalt serve over time: models loaded and unloaded under load give their memory back, and a
bounded soak with bad requests mixed in loses no answer and keeps RSS flat (docs/serving.md)."""
import os
import random
import threading
import time

import numpy as np

import basalt
from basalt.client import ClientError, GrpcClient, HttpClient
from conftest import MODELS, Server, make_repository

DET, CLS, VAD = "ppocr_v4_det.onnx", "ppocr_mobile_v2_cls.onnx", "silero_vad_v5.onnx"
SOAK_SECONDS = float(os.environ.get("BASALT_SOAK_SECONDS", "60"))


def rss(client):
    for line in client.request("GET", "/metrics")[2].decode().splitlines():
        if line.startswith("process_resident_memory_bytes "):
            return int(float(line.split()[1]))
    raise AssertionError("no process_resident_memory_bytes")


def vad_inputs(r):
    return {"input": (r.standard_normal((1, 512)) * 0.1).astype(np.float32),
            "state": np.zeros((2, 1, 128), np.float32), "sr": np.array(16000, np.int64)}


def test_load_unload_under_load_gives_memory_back(tmp_path):
    repo = make_repository(str(tmp_path), {"vad": (VAD, None), "det": (DET, None)})
    s = Server(repo, "--model", "vad")
    want = basalt.InferenceSession(os.path.join(MODELS, VAD))
    stop, failures, answered = threading.Event(), [], [0]

    def client():
        r, h = np.random.default_rng(0), HttpClient(s.http)
        while not stop.is_set():
            ins = vad_inputs(r)
            try:
                got = h.infer("vad", ins)
                if not np.array_equal(got["output"], want.run(["output"], ins)[0]):
                    failures.append("wrong answer")
                answered[0] += 1
            except Exception as e:  # noqa: BLE001
                failures.append(repr(e))

    t = threading.Thread(target=client)
    t.start()
    try:
        h = HttpClient(s.http)
        x = np.random.default_rng(1).random((1, 3, 320, 320), dtype=np.float32)
        # One load, run and unload first, so that code pages and allocator pools are warm.
        h.load("det"), h.infer("det", {"x": x}), h.unload("det")
        time.sleep(0.2)
        before = rss(h)
        peaks = []
        for _ in range(10):
            h.load("det")
            h.infer("det", {"x": x})
            peaks.append(rss(h))
            h.unload("det")
        time.sleep(0.2)
        after = rss(h)
    finally:
        stop.set()
        t.join()
        assert s.stop() == 0
    assert not failures, failures[:5]
    assert answered[0] > 10
    assert max(peaks) > before, "the loaded model should show in RSS"
    print(f"rss before {before / 2**20:.1f} MB, loaded peak {max(peaks) / 2**20:.1f} MB, after {after / 2**20:.1f} MB, "
          f"{answered[0]} requests answered meanwhile")
    assert abs(after - before) <= 5 * 2**20, (before, after)


def test_soak(tmp_path):
    repo = make_repository(str(tmp_path), {
        "vad": (VAD, None), "cls": (CLS, {"max_batch_size": 8, "max_queue_delay_us": 2000})})
    s = Server(repo)
    sv, sc = (basalt.InferenceSession(os.path.join(MODELS, m)) for m in (VAD, CLS))
    stop, lat, errors, rss_samples = threading.Event(), [], [], []
    counts = {"good": 0, "bad": 0}
    lock = threading.Lock()

    def worker(k):
        r = random.Random(k)
        nr = np.random.default_rng(k)
        c = HttpClient(s.http) if k % 2 else GrpcClient(s.grpc)
        while not stop.is_set():
            roll = r.random()
            t0 = time.perf_counter()
            try:
                if roll < 0.1:  # a bad request: wrong dtype, unknown model or garbage
                    try:
                        if k % 2:
                            st, _, _ = c.request("POST", "/v2/models/vad/infer", b'{"inputs": [{"name"')
                            ok = st == 400
                        else:
                            c.infer("nosuch", {"x": np.zeros(1, np.float32)})
                            ok = False
                    except ClientError as e:
                        ok = e.status in (400, 404, "NOT_FOUND", "INVALID_ARGUMENT")
                    with lock:
                        counts["bad"] += 1
                        if not ok:
                            errors.append("bad request not refused properly")
                    continue
                if roll < 0.55:
                    ins = vad_inputs(nr)
                    got = c.infer("vad", ins)["output"]
                    want = sv.run(["output"], ins)[0]
                    same = np.array_equal(got, want)
                else:
                    x = nr.random((1, 3, 48, 192), dtype=np.float32)
                    got = next(iter(c.infer("cls", {"x": x}).values()))
                    same = np.allclose(got, sc.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)
                with lock:
                    lat.append(time.perf_counter() - t0)
                    counts["good"] += 1
                    if not same:
                        errors.append("wrong answer")
            except Exception as e:  # noqa: BLE001
                with lock:
                    errors.append(repr(e))

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
    for t in ts:
        t.start()
    h = HttpClient(s.http)
    t_end = time.time() + SOAK_SECONDS
    while time.time() < t_end:
        time.sleep(min(2.0, max(0.0, t_end - time.time())))
        rss_samples.append(rss(h))
    stop.set()
    for t in ts:
        t.join()
    rc = s.stop()
    assert rc == 0
    assert not errors, errors[:5]
    assert counts["good"] > 100 and counts["bad"] > 5
    lat.sort()
    p50, p99 = lat[len(lat) // 2], lat[int(len(lat) * 0.99)]
    warm = rss_samples[len(rss_samples) // 4:]
    growth = (warm[-1] - warm[0]) / 2**20
    print(f"soak {SOAK_SECONDS:.0f} s: {counts['good']} good + {counts['bad']} bad requests, p50 {p50 * 1e3:.2f} ms, "
          f"p99 {p99 * 1e3:.2f} ms, RSS after warm-up {warm[0] / 2**20:.1f} -> {warm[-1] / 2**20:.1f} MB")
    assert growth <= 8, f"RSS grew {growth:.1f} MB after warm-up"
