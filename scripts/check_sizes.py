#!/usr/bin/env python3
"""Source-size check (issue 36): no file in src/ over MAX_FILE lines, no function over MAX_FN.

A function is a brace block opened at column 0 (namespace blocks excluded) or a top-level
member function inside a class at one indent; lambdas count toward the function that holds
them. Prints the offenders and exits 1 if there are any. Exceptions need a reason, listed in
ALLOWED below."""
import os
import re
import sys

MAX_FILE = 1000
MAX_FN = 150
ALLOWED = {}  # "path": "reason"

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def functions(lines):
    """Yields (start line, length, signature) for brace blocks opened at column 0 or 2."""
    depth = 0
    stack = []
    for i, line in enumerate(lines):
        code = re.sub(r'//.*', '', line)
        code = re.sub(r'"(\\.|[^"\\])*"', '""', code)
        code = re.sub(r"'(\\.|[^'\\])*'", "''", code)
        for ch in code:
            if ch == '{':
                indent = len(line) - len(line.lstrip())
                is_ns = re.match(r'\s*(namespace\b|extern "C")', line) is not None
                is_type = re.match(r'\s*(class|struct|union|enum)\b', line) is not None
                stack.append((i, depth, is_ns or is_type, indent, line.strip()))
                depth += 1
            elif ch == '}':
                depth -= 1
                if stack:
                    s, d, skip, indent, sig = stack.pop()
                    outer_ok = all(x[2] for x in stack)  # only namespaces/types around it
                    if not skip and outer_ok:
                        yield s + 1, i - s + 1, sig


def main():
    bad = []
    for dirpath, _, files in os.walk(os.path.join(ROOT, 'src')):
        for f in sorted(files):
            if not f.endswith(('.cpp', '.hpp', '.inc', '.h', '.cu')):
                continue
            p = os.path.join(dirpath, f)
            rel = os.path.relpath(p, ROOT)
            if rel in ALLOWED:
                continue
            lines = open(p, encoding='utf-8', errors='replace').read().split('\n')
            if len(lines) > MAX_FILE:
                bad.append(f'{rel}: {len(lines)} lines (max {MAX_FILE})')
            for start, n, sig in functions(lines):
                if n > MAX_FN:
                    bad.append(f'{rel}:{start}: function of {n} lines (max {MAX_FN}): {sig[:80]}')
    for b in bad:
        print(b)
    print(f'sizes: {len(bad)} problems')
    print(f'{0 if bad else 1} passed, {1 if bad else 0} failed')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
