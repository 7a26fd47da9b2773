"""onnxruntime.capi: the module paths onnxruntime programs import exceptions and types from."""
from . import onnxruntime_pybind11_state  # noqa: F401
from . import _pybind_state  # noqa: F401
