"""basalt: an ONNX inference runtime for CPUs, with onnxruntime's Python API.

    import basalt
    sess = basalt.InferenceSession("model.onnx")
    (y,) = sess.run(None, {"x": x})

The same API is importable as `onnxruntime` from build/python/compat/ (docs/python.md).
"""
from . import _native
from ._native import (  # noqa: F401  (re-exported)
    BasaltError, BasaltIOError, CancelledError, InternalError, InvalidArgumentError, InvalidModelError,
    InvalidProtobufError, MemoryLimitError, NodeArg, UnsupportedError,
)
from ._options import (  # noqa: F401
    ExecutionMode, ExecutionOrder, GraphOptimizationLevel, OrtAllocatorType, OrtArenaCfg,
    OrtExecutionProviderDevicePolicy, OrtMemoryInfo, OrtMemType, OrtSparseFormat, RunOptions, SessionOptions,
)
from ._session import (  # noqa: F401
    ALL_PROVIDERS, AVAILABLE_PROVIDERS, InferenceSession, IOBinding, ModelMetadata, OrtDevice, OrtValue,
    SparseTensor,
)

__version__ = "0.1.0"
# The onnxruntime release whose Python API this package follows (the alias reports it).
ORT_API_VERSION = "1.30.0"

SessionIOBinding = IOBinding

_logger = {"severity": 2, "verbosity": 0}


def get_available_providers():
    return list(AVAILABLE_PROVIDERS)


def get_all_providers():
    return list(ALL_PROVIDERS)


def get_device():
    return "CPU"


def get_version_string():
    return ORT_API_VERSION


def get_build_info():
    return f"basalt {__version__}, onnxruntime API {ORT_API_VERSION}, CPU"


def has_collective_ops():
    return False


def set_default_logger_severity(severity):
    """Accepted and validated (0 verbose .. 4 fatal): basalt logs nothing but its warnings."""
    if not isinstance(severity, int) or isinstance(severity, bool) or not 0 <= severity <= 4:
        raise InvalidArgumentError(f"Invalid logging severity level {severity!r}: use 0 (verbose) .. 4 (fatal)")
    _logger["severity"] = severity


def set_default_logger_verbosity(verbosity):
    if not isinstance(verbosity, int) or verbosity < 0:
        raise InvalidArgumentError(f"logging verbosity must be an int >= 0, got {verbosity!r}")
    _logger["verbosity"] = verbosity


def set_seed(seed):
    """Seeds the random ops (RandomNormal, RandomUniform[Like], Bernoulli, Multinomial) that have
    no seed attribute, in every session: each run of them then draws the same values."""
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    _native.set_default_random_seed(seed)


def enable_telemetry_events():
    """Accepted: basalt sends no telemetry."""


def disable_telemetry_events():
    """Accepted: basalt sends no telemetry."""


def preload_dlls(cuda=True, cudnn=True, msvc=True, directory=None):
    """Accepted: basalt loads no GPU libraries."""


def create_and_register_allocator(mem_info=None, arena_cfg=None):
    """Accepted: each basalt session plans its own arena, sized before the run (docs/memory.md)."""


create_and_register_allocator_v2 = create_and_register_allocator


def get_ep_devices():
    """onnxruntime 1.22's plug-in execution-provider devices: basalt has none (it is the CPU provider)."""
    return []


def register_execution_provider_library(registration_name, path):
    raise UnsupportedError(f"execution provider library '{path}': basalt loads no execution providers")


def unregister_execution_provider_library(registration_name):
    raise UnsupportedError(f"no execution provider library '{registration_name}' is registered")


class LoraAdapter:
    """onnxruntime's LoRA adapters: not supported."""

    def __init__(self, *args, **kwargs):
        raise UnsupportedError("basalt does not load LoRA adapters")


AdapterFormat = LoraAdapter


class ModelCompiler:
    """onnxruntime's ahead-of-time EP compilation: not supported (there is no EP to compile for)."""

    def __init__(self, *args, **kwargs):
        raise UnsupportedError("basalt has no execution providers to compile a model for")
