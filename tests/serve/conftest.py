"""Fixtures of the serving suites: a model repository in a temporary directory and `basalt serve`
started on free loopback ports (docs/testing.md)."""
import os
import re
import shutil
import signal
import subprocess
import time

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("BASALT_BUILD", os.path.join(ROOT, "build"))
BASALT = os.path.join(BUILD, "basalt")
MODELS = os.path.join(ROOT, "models")


def make_repository(root, models):
    """models: {name: (model file under models/, config dict or None)} -> repository path."""
    import json
    for name, (src, cfg) in models.items():
        os.makedirs(os.path.join(root, name, "1"), exist_ok=True)
        shutil.copyfile(os.path.join(MODELS, src), os.path.join(root, name, "1", "model.onnx"))
        if cfg is not None:
            with open(os.path.join(root, name, "config.json"), "w") as f:
                json.dump(cfg, f)
    return root


class Server:
    def __init__(self, repo, *args, env=None):
        self.proc = subprocess.Popen([BASALT, "serve", "--model-repository", repo, "--http-port", "0",
                                      "--grpc-port", "0", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env)
        line = self.proc.stdout.readline()
        m = re.search(r"http \S+:(-?\d+) grpc \S+:(-?\d+)", line)
        if not m:
            err = self.proc.stderr.read() if self.proc.poll() is not None else ""
            raise RuntimeError(f"basalt serve did not start: {line!r} {err}")
        self.http_port, self.grpc_port = int(m.group(1)), int(m.group(2))
        assert self.proc.stdout.readline().strip() == "basalt serve: ready"
        self.http = f"127.0.0.1:{self.http_port}"
        self.grpc = f"127.0.0.1:{self.grpc_port}"

    def stop(self, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.stderr = self.proc.stderr.read()
        return rc


@pytest.fixture(scope="module")
def tmp_module_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("repo"))
