"""Shared by the optimizer suites (run_opt_tests.py, fusions_real.py): the PASS/FAIL tally,
`basalt optimize` with its JSON report, and op counts of a saved model."""
import json
import subprocess


class Tally:
    """Counts checks and prints one `PASS what` / `FAIL what: detail` line per check."""

    def __init__(self):
        self.passed = 0
        self.failed = 0

    def result(self, ok, what, detail=""):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
        print(f"{'PASS' if ok else 'FAIL'} {what}{': ' + detail if detail else ''}", flush=True)

    def finish(self):
        """Prints the suite's "N passed, N failed" line; returns the exit status."""
        print(f"{self.passed} passed, {self.failed} failed")
        return 1 if self.failed else 0


def op_counts(path):
    """{op: count} of the graph saved at path; ops outside ai.onnx are keyed "domain::Op"."""
    import onnx
    m = onnx.load(path, load_external_data=False)
    counts = {}
    for n in m.graph.node:
        key = (n.domain + "::" if n.domain else "") + n.op_type
        counts[key] = counts.get(key, 0) + 1
    return counts


def optimize(basalt, model, out, extra, standard_ops=False, timeout=1200):
    """Runs `basalt optimize MODEL --level all --json --check -o OUT` (+ extra input options).
    Returns (CompletedProcess, parsed JSON report or None when stdout is not JSON)."""
    cmd = [basalt, "optimize", model, "--level", "all", "--json", "--check", "-o", out] + extra
    if standard_ops:
        cmd.append("--standard-ops")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    try:
        return p, json.loads(p.stdout)
    except json.JSONDecodeError:
        return p, None
