#!/usr/bin/env python3
"""The layer check (make check, make test): every #include "dir/file" in src/ points down.

The layers, bottom to top (docs/architecture.md explains each):

    core      tensor, dtype, errors, pages, mapped files, arena, dynamic pool, thread pool, config
    kernels   the math: GEMM, convolution, pooling, element-wise rows, per-ISA variants
    graph     Graph, Node, Model: the in-memory model, knowing no kernels
    ops       one definition per operator: kernel factory, shape inference, aliasing, in place
    onnx      the ONNX protobuf reader and writer (file -> Model)
    opt       the graph optimizer (fusions, layout, constant folding)
    runtime   shape inference walk, memory planner, executor, session, profiler
    api       the C API (include/basalt/c_api.h)
    serve     the Open Inference Protocol server (basalt serve): repository, scheduler, REST, gRPC
    tools     the CLI

A file may include its own folder and any folder below it, never one above. Public headers
(include/basalt/) may include only each other. Exit code 1 and one line per violation when an
include points up, names an unknown folder, or when two folders include each other.
usage: scripts/check_layers.py [ROOT]
"""
import os
import re
import sys

LAYERS = ["core", "kernels", "graph", "ops", "onnx", "opt", "runtime", "api", "serve", "tools"]
RANK = {name: i for i, name in enumerate(LAYERS)}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SOURCE_EXT = (".cpp", ".hpp", ".inc", ".h", ".c")


def includes(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if m:
                yield lineno, m.group(1)


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    src = os.path.join(root, "src")
    problems = []
    edges = {}  # (from folder, to folder) -> first "file:line"
    checked = 0
    for folder in sorted(os.listdir(src)):
        fdir = os.path.join(src, folder)
        if not os.path.isdir(fdir):
            continue
        if folder not in RANK:
            problems.append(f"src/{folder}/: a folder that is not a layer (add it to LAYERS in scripts/check_layers.py)")
            continue
        for dirpath, _, files in os.walk(fdir):
            for name in sorted(files):
                if not name.endswith(SOURCE_EXT):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                checked += 1
                for lineno, inc in includes(path):
                    target = inc.split("/", 1)[0] if "/" in inc else None
                    if target is None:
                        # A same-folder include written without its folder ("impl.inc").
                        if not os.path.exists(os.path.join(dirpath, inc)):
                            problems.append(f"{rel}:{lineno}: #include \"{inc}\" names no folder and no file beside it")
                        continue
                    if target not in RANK:
                        problems.append(f"{rel}:{lineno}: #include \"{inc}\": unknown folder '{target}'")
                        continue
                    edges.setdefault((folder, target), f"{rel}:{lineno}")
                    if RANK[target] > RANK[folder]:
                        problems.append(f"{rel}:{lineno}: #include \"{inc}\" points up ({folder} is below {target})")
    for (a, b), where in sorted(edges.items()):
        if a < b and (b, a) in edges:
            problems.append(f"folders include each other: {a} ({where}) and {b} ({edges[(b, a)]})")
    pub = os.path.join(root, "include", "basalt")
    for name in sorted(os.listdir(pub)):
        path = os.path.join(pub, name)
        checked += 1
        for lineno, inc in includes(path):
            problems.append(f"include/basalt/{name}:{lineno}: public header includes \"{inc}\" (only <basalt/...> allowed)")
    for p in problems:
        print(p)
    print(f"layers: {checked} files checked, {len(problems)} problems")
    print(f"{1 if not problems else 0} passed, {1 if problems else 0} failed")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
