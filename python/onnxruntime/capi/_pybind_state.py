"""onnxruntime.capi._pybind_state, as some programs import it."""
from .onnxruntime_pybind11_state import *  # noqa: F401,F403
from .onnxruntime_pybind11_state import (  # noqa: F401
    EngineError, EPFail, Fail, InvalidArgument, InvalidGraph, InvalidProtobuf, ModelLoaded, NoModel, NoSuchFile,
    NotImplemented, RuntimeException,
)
