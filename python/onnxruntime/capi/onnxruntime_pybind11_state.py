"""onnxruntime's exception classes and pybind types. basalt raises its own classes, which derive
from these, so `except InvalidArgument` catches basalt's InvalidArgumentError."""
from basalt._native import ort_state as _state

Fail = _state.Fail
InvalidArgument = _state.InvalidArgument
NoSuchFile = _state.NoSuchFile
NoModel = _state.NoModel
EngineError = _state.EngineError
RuntimeException = _state.RuntimeException
InvalidProtobuf = _state.InvalidProtobuf
ModelLoaded = _state.ModelLoaded
NotImplemented = _state.NotImplemented  # noqa: A001 (onnxruntime's name)
InvalidGraph = _state.InvalidGraph
EPFail = _state.EPFail
from basalt import (  # noqa: F401
    ExecutionMode, ExecutionOrder, GraphOptimizationLevel, ModelMetadata, NodeArg, OrtAllocatorType, OrtMemType,
    OrtSparseFormat, RunOptions, SessionIOBinding, SessionOptions, get_all_providers, get_available_providers,
    get_build_info, get_device, get_version_string, set_default_logger_severity, set_default_logger_verbosity,
    set_seed,
)
