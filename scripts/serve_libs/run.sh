#!/usr/bin/env bash
# The measurement behind basalt serve's HTTP and JSON libraries (docs/dependencies.md): a POST echo
# server on cpp-httplib and on Boost.Beast under wrk at concurrency 1, 4, 16, and a KServe v2 JSON
# request parsed by nlohmann::json, RapidJSON and simdjson (and written by nlohmann, RapidJSON and
# std::to_chars). Needs libcpp-httplib-dev rapidjson-dev libsimdjson-dev libboost-dev wrk.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$T"' EXIT
g++ -O2 -std=c++20 "$HERE/httplib_echo.cpp" -o "$T/httplib_echo" -lcpp-httplib -lpthread
g++ -O2 -std=c++20 "$HERE/beast_echo.cpp" -o "$T/beast_echo" -lpthread
g++ -O2 -std=c++20 "$HERE/json_bench.cpp" -o "$T/json_bench" -lsimdjson
"$T/httplib_echo" 18001 & "$T/beast_echo" 18002 & sleep 0.5
for c in 1 4 16; do
  for p in 18001 18002; do
    name=$([ $p = 18001 ] && echo cpp-httplib || echo beast)
    echo "$name c=$c: $(wrk -t1 -c$c -d3s --latency -s "$HERE/post.lua" http://127.0.0.1:$p/v2/models/m/infer |
      grep -E 'Requests/sec|50%|99%' | tr -s ' ' | tr '\n' ' ')"
  done
done
"$T/json_bench" 4
"$T/json_bench" 150528
