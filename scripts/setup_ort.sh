#!/usr/bin/env bash
# Installs onnxruntime-node (CPU) into .cache/ort in the repository, only when it is missing,
# and prints the package directory (the one holding package.json). The parity suite
# (tests/parity/) uses it as the reference.
#
# usage: scripts/setup_ort.sh            -> prints .../.cache/ort/node_modules/onnxruntime-node
# env:   ORT_VERSION (default 1.30.0), ORT_DIR (default <repo>/.cache/ort)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
version=${ORT_VERSION:-1.30.0}
dir=${ORT_DIR:-$repo/.cache/ort}
pkg=$dir/node_modules/onnxruntime-node

installed_ok() {
  [ -f "$pkg/package.json" ] || return 1
  (cd "$dir" && node -e '
    const v = require(process.argv[1] + "/package.json").version;
    if (v !== process.argv[2]) process.exit(1);
    require(process.argv[1]);  // loads the native binding: fails if the CPU binary is missing
  ' "$pkg" "$version") >/dev/null 2>&1
}

if ! installed_ok; then
  command -v npm >/dev/null || { echo "setup_ort.sh: npm not found (need Node.js >= 18)" >&2; exit 1; }
  mkdir -p "$dir"
  [ -f "$dir/package.json" ] || echo '{"name":"basalt-ort-cache","private":true}' > "$dir/package.json"
  echo "installing onnxruntime-node@$version into $dir" >&2
  # ONNXRUNTIME_NODE_INSTALL=skip only skips the optional CUDA/TensorRT download of the
  # install script; the CPU binaries ship inside the npm package itself.
  (cd "$dir" && ONNXRUNTIME_NODE_INSTALL=skip npm install --no-audit --no-fund --silent \
      "onnxruntime-node@$version" >&2)
  if ! installed_ok; then
    echo "setup_ort.sh: onnxruntime-node@$version installed in $dir but cannot be loaded" >&2
    exit 1
  fi
fi
echo "$pkg"
