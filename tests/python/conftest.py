# Makes `import basalt` find the built module: PYTHONPATH wins (scripts/run_tests.sh sets it to
# BUILD/python); otherwise BASALT_BUILD/python, then build/python of this checkout.
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

try:
    import basalt  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(os.environ.get("BASALT_BUILD", os.path.join(ROOT, "build")), "python"))
