#!/usr/bin/env bash
# basalt vs ONNX Runtime 1.30 on this machine (issues 4 and 5): speed on the benchmark set at 1 and
# 2 threads, and the memory scenarios (PaddleOCR det over 40 sizes; det/rec/cls switch x10).
# Not part of `make test` (it takes a long time); `make bench` runs it.
#
# usage: scripts/bench.sh [BUILD_DIR] [bench_compare.py options...]
#   e.g. scripts/bench.sh build --threads 2 --models resnet50,bert_mini --scenarios speed
#        scripts/bench.sh build --quick        (smoke: SqueezeNet, 1 thread, 3 iters)
# First it installs what is missing: onnxruntime-node (scripts/setup_ort.sh), the real models
# (scripts/fetch_models.sh) and the generated architecture models (tests/parity/gen_models.py;
# models already there are kept).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-build}
[ $# -gt 0 ] && shift
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
[ -x "$BUILD/basalt" ] || { echo "bench.sh: $BUILD/basalt not found (make build first)" >&2; exit 1; }
bash "$ROOT/scripts/setup_ort.sh" >/dev/null
if [[ " $* " == *" --quick "* ]]; then  # the smoke run needs SqueezeNet only
  /usr/bin/python3 "$ROOT/tests/parity/gen_models.py" "$ROOT/models/generated" --only light_squeezenet >/dev/null 2>&1
else
  bash "$ROOT/scripts/fetch_models.sh" "$ROOT/models" >/dev/null
  /usr/bin/python3 "$ROOT/tests/parity/gen_models.py" "$ROOT/models/generated" >/dev/null 2>&1
fi
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), load $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 "$ROOT/scripts/bench_compare.py" --basalt "$BUILD/basalt" "$@"
# The Python API's per-call overhead against the C API (docs/python.md).
if [[ " $* " != *" --quick "* ]] && [ -x "$BUILD/basalt_capi_overhead" ]; then
  /usr/bin/python3 "$ROOT/scripts/bench_python_overhead.py" --build "$BUILD"
fi
# basalt serve under load (wrk, h2load) beside the same models in process (docs/serving.md).
if [[ " $* " != *" --quick "* ]]; then
  /usr/bin/python3 "$ROOT/scripts/bench_serve.py" --build "$BUILD"
fi
# int8: basalt and ORT on the same quantized models, and basalt int8 against its fp32 (docs/quantization.md).
if [[ " $* " != *" --quick "* ]]; then
  /usr/bin/python3 "$ROOT/scripts/bench_int8.py" --basalt "$BUILD/basalt"
fi
