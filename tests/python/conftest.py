# Makes `import basalt` find the built package: PYTHONPATH wins (scripts/run_tests.sh sets it to
# BUILD/python); otherwise BASALT_BUILD/python, then build/python of this checkout. The onnxruntime
# alias (BUILD/python/compat) goes first on sys.path, so `import onnxruntime` is basalt's alias.
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("BASALT_BUILD", os.path.join(ROOT, "build"))

try:
    import basalt  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(BUILD, "python"))
    import basalt  # noqa: F401

_compat = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(basalt.__file__))), "compat")
sys.path.insert(0, _compat)
