"""Shared by the optimizer suites (run_opt_tests.py, fusions_real.py): the PASS/FAIL tally,
`basalt optimize` with its JSON report, and op counts of a saved model."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tally import Tally  # noqa: E402,F401  (re-exported for the optimizer suites)


def op_counts(path):
    """{op: count} of the graph saved at path; ops outside ai.onnx are keyed "domain::Op"."""
    import onnx
    m = onnx.load(path, load_external_data=False)
    counts = {}
    for n in m.graph.node:
        key = (n.domain + "::" if n.domain else "") + n.op_type
        counts[key] = counts.get(key, 0) + 1
    return counts


def optimize(basalt, model, out, extra, standard_ops=False, timeout=1200, env=None):
    """Runs `basalt optimize MODEL --level all --json --check -o OUT` (+ extra input options;
    env: extra environment variables). Returns (CompletedProcess, parsed JSON report or None when
    stdout is not JSON)."""
    cmd = [basalt, "optimize", model, "--level", "all", "--json", "--check", "-o", out] + extra
    if standard_ops:
        cmd.append("--standard-ops")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                       env=dict(os.environ, **env) if env else None)
    try:
        return p, json.loads(p.stdout)
    except json.JSONDecodeError:
        return p, None
