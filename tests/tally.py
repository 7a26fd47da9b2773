"""The PASS/FAIL tally shared by the Python test suites (optimizer, CLI): one line per check and the
suite's closing "N passed, N failed" line, which scripts/run_tests.sh reads."""


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
        print(f"{'PASS' if ok else 'FAIL'} {what}{': ' + str(detail) if detail else ''}", flush=True)

    def finish(self):
        """Prints the suite's "N passed, N failed" line; returns the exit status."""
        print(f"{self.passed} passed, {self.failed} failed")
        return 1 if self.failed else 0
