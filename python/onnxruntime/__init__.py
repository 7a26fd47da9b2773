"""onnxruntime, answered by basalt: `import onnxruntime` runs an unmodified onnxruntime program on
basalt when build/python/compat/ (or a pip install of python/compat/) comes first on sys.path.
Everything here is basalt's package under onnxruntime's names (docs/python.md)."""
import basalt as _basalt
from basalt import *  # noqa: F401,F403
from basalt import (  # noqa: F401  (names `import *` leaves out)
    AdapterFormat, ExecutionMode, ExecutionOrder, GraphOptimizationLevel, InferenceSession, IOBinding, LoraAdapter,
    ModelCompiler, ModelMetadata, NodeArg, OrtAllocatorType, OrtArenaCfg, OrtDevice, OrtExecutionProviderDevicePolicy,
    OrtMemoryInfo, OrtMemType, OrtSparseFormat, OrtValue, RunOptions, SessionIOBinding, get_ep_devices,
    register_execution_provider_library, unregister_execution_provider_library,
    SessionOptions, SparseTensor, create_and_register_allocator, create_and_register_allocator_v2,
    disable_telemetry_events, enable_telemetry_events, get_all_providers, get_available_providers, get_build_info,
    get_device, get_version_string, has_collective_ops, preload_dlls, set_default_logger_severity,
    set_default_logger_verbosity, set_seed,
)

from . import capi  # noqa: F401

# A PEP 440 version: onnxruntime's API level, with basalt's version as the local part.
__version__ = f"{_basalt.ORT_API_VERSION}+basalt.{_basalt.__version__}"
__author__ = "basalt"
