"""SessionOptions, RunOptions and onnxruntime's enums, over basalt's native options.

Every attribute and method of onnxruntime's SessionOptions exists here. Each is honoured (mapped
onto basalt's options when the session is created) or accepted with a documented reason why it
changes nothing (docs/python.md has the table). Setting an attribute neither API has is an
AttributeError, so a typo is not silently ignored.
"""
import enum
import os

from . import _native

# onnxruntime's limits on config entries (onnxruntime_session_options_config_keys.h).
_MAX_KEY = 1024
_MAX_VALUE = 2048


class GraphOptimizationLevel(enum.IntEnum):
    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


class ExecutionMode(enum.IntEnum):
    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


class ExecutionOrder(enum.IntEnum):
    DEFAULT = 0
    PRIORITY_BASED = 1
    MEMORY_EFFICIENT = 2


class OrtAllocatorType(enum.IntEnum):
    INVALID = -1
    ORT_DEVICE_ALLOCATOR = 0
    ORT_ARENA_ALLOCATOR = 1


class OrtMemType(enum.IntEnum):
    CPU_INPUT = -2
    CPU_OUTPUT = -1
    CPU = -1
    DEFAULT = 0


class OrtExecutionProviderDevicePolicy(enum.IntEnum):
    DEFAULT = 0
    PREFER_CPU = 1
    PREFER_NPU = 2
    PREFER_GPU = 3
    MAX_PERFORMANCE = 4
    MAX_EFFICIENCY = 5
    MIN_OVERALL_POWER = 6


class OrtSparseFormat(enum.IntEnum):
    ORT_SPARSE_UNDEFINED = 0
    ORT_SPARSE_COO = 1
    ORT_SPARSE_CSR = 2
    ORT_SPARSE_BLOCK_SPARSE = 4


# basalt's optimizer has 0 none, 1 basic, 2 extended, 3 all (constant folding, fusions, the NCHWc
# layout). onnxruntime's ORT_ENABLE_LAYOUT (extended + layout) and ORT_ENABLE_ALL both map to 3.
_LEVEL_TO_BASALT = {0: 0, 1: 1, 2: 2, 3: 3, 99: 3}


def _level(v):
    try:
        lv = int(v)
    except (TypeError, ValueError):
        raise TypeError(f"graph_optimization_level must be a GraphOptimizationLevel, got {type(v).__name__}") from None
    if lv not in _LEVEL_TO_BASALT:
        raise _native.InvalidArgumentError(
            f"graph_optimization_level must be one of 0, 1, 2, 3, 99 (GraphOptimizationLevel), got {lv}")
    return GraphOptimizationLevel(lv)


def _enum(cls, name, v):
    try:
        return cls(int(v))
    except (TypeError, ValueError):
        raise _native.InvalidArgumentError(f"{name} must be one of {[m.name for m in cls]}, got {v!r}") from None


def _severity(name, v):
    if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= 4:
        raise _native.InvalidArgumentError(f"{name} must be 0 (verbose) .. 4 (fatal), got {v!r}")
    return v


def _check_config_entry(key, value):
    if not isinstance(key, str) or not isinstance(value, str):
        raise TypeError("config entries take a str key and a str value")
    if not key or len(key) > _MAX_KEY:
        raise _native.InvalidArgumentError(f"Config key is empty or longer than maximum length {_MAX_KEY}")
    if len(value) > _MAX_VALUE:
        raise _native.InvalidArgumentError(f"Config value is longer than maximum length {_MAX_VALUE}")


def _flag(key, value):
    if value not in ("0", "1"):
        raise _native.InvalidArgumentError(f"session config entry '{key}' must be '0' or '1', got '{value}'")
    return value == "1"


def _bool_option(slot, doc):
    """A SessionOptions property kept as a bool in `slot` and mapped onto the native options at load."""
    def get(self):
        return getattr(self, slot)

    def set_(self, v):
        object.__setattr__(self, slot, bool(v))
    return property(get, set_, doc=doc)


# basalt's own knobs, read and written straight on the native options (validated there).
_NATIVE = ("threads", "shared_pool", "spin_us", "memory_limit", "memory_plan", "plan_cache_entries",
           "plan_cache_bytes", "dynamic_pool_bytes", "winograd", "allow_unsupported", "profile_path")


class SessionOptions:
    """Options of an InferenceSession: onnxruntime's attributes and methods plus basalt's own
    (threads, shared_pool, spin_us, memory_limit, memory_plan, plan_cache_entries, plan_cache_bytes,
    dynamic_pool_bytes, winograd, allow_unsupported, profile_path)."""

    __slots__ = ("_o", "_level", "_execution_mode", "_execution_order", "_inter", "_arena", "_pattern", "_reuse",
                 "_profiling", "_prefix", "_optimized", "_log_sev", "_log_verb", "_logid", "_deterministic",
                 "_config", "_initializers", "_free_by_name", "_free_by_denotation")

    def __init__(self):
        o = _native.SessionOptions()
        object.__setattr__(self, "_o", o)
        object.__setattr__(self, "_level", GraphOptimizationLevel.ORT_ENABLE_ALL)
        object.__setattr__(self, "_execution_mode", ExecutionMode.ORT_SEQUENTIAL)
        object.__setattr__(self, "_execution_order", ExecutionOrder.DEFAULT)
        object.__setattr__(self, "_inter", 0)
        object.__setattr__(self, "_arena", True)
        object.__setattr__(self, "_pattern", True)
        object.__setattr__(self, "_reuse", True)
        object.__setattr__(self, "_profiling", False)
        object.__setattr__(self, "_prefix", "onnxruntime_profile_")
        object.__setattr__(self, "_optimized", "")
        object.__setattr__(self, "_log_sev", 2)
        object.__setattr__(self, "_log_verb", 0)
        object.__setattr__(self, "_logid", "")
        object.__setattr__(self, "_deterministic", False)
        object.__setattr__(self, "_config", {})
        object.__setattr__(self, "_initializers", {})
        object.__setattr__(self, "_free_by_name", {})
        object.__setattr__(self, "_free_by_denotation", {})

    # -- attributes -------------------------------------------------------------------------

    def __getattr__(self, name):  # only called for names that are not slots or properties
        if name in _NATIVE:
            return getattr(object.__getattribute__(self, "_o"), name)
        raise AttributeError(f"'SessionOptions' object has no attribute '{name}'")

    def __setattr__(self, name, value):
        if name in _NATIVE:
            setattr(self._o, name, value)
        elif isinstance(getattr(type(self), name, None), property):
            object.__setattr__(self, name, value)
        else:
            raise AttributeError(f"'SessionOptions' object has no attribute '{name}' (neither onnxruntime nor "
                                 "basalt has this option)")

    @property
    def intra_op_num_threads(self):
        return self._o.threads

    @intra_op_num_threads.setter
    def intra_op_num_threads(self, n):
        self._o.intra_op_num_threads = n

    @property
    def inter_op_num_threads(self):
        """Accepted: basalt runs a graph's nodes one after another, with every thread inside each op
        (the parallelism onnxruntime's ORT_PARALLEL mode adds is not there)."""
        return self._inter

    @inter_op_num_threads.setter
    def inter_op_num_threads(self, n):
        if not isinstance(n, int) or n < 0:
            raise _native.InvalidArgumentError(f"inter_op_num_threads must be an int >= 0 (0 = default), got {n!r}")
        object.__setattr__(self, "_inter", n)

    @property
    def graph_optimization_level(self):
        return self._level

    @graph_optimization_level.setter
    def graph_optimization_level(self, v):
        object.__setattr__(self, "_level", _level(v))

    @property
    def execution_mode(self):
        return self._execution_mode

    @execution_mode.setter
    def execution_mode(self, v):
        object.__setattr__(self, "_execution_mode", _enum(ExecutionMode, "execution_mode", v))

    @property
    def execution_order(self):
        return self._execution_order

    @execution_order.setter
    def execution_order(self, v):
        object.__setattr__(self, "_execution_order", _enum(ExecutionOrder, "execution_order", v))

    enable_cpu_mem_arena = _bool_option("_arena", "False: no planned arena, every tensor from the heap (basalt's memory_plan off).")
    enable_mem_pattern = _bool_option("_pattern", "False: plans are not cached across runs (basalt's plan_cache_entries = 0).")
    enable_mem_reuse = _bool_option("_reuse", "False: tensors do not share planned memory (basalt's memory_plan off).")
    @property
    def enable_profiling(self):
        return self._profiling or self._o.enable_profiling

    @enable_profiling.setter
    def enable_profiling(self, v):
        object.__setattr__(self, "_profiling", bool(v))
        self._o.enable_profiling = bool(v)

    @property
    def profile_file_prefix(self):
        return self._prefix

    @profile_file_prefix.setter
    def profile_file_prefix(self, v):
        object.__setattr__(self, "_prefix", os.fspath(v))

    @property
    def optimized_model_filepath(self):
        return self._optimized

    @optimized_model_filepath.setter
    def optimized_model_filepath(self, v):
        object.__setattr__(self, "_optimized", os.fspath(v))

    @property
    def log_severity_level(self):
        return self._log_sev

    @log_severity_level.setter
    def log_severity_level(self, v):
        object.__setattr__(self, "_log_sev", _severity("log_severity_level", v))

    @property
    def log_verbosity_level(self):
        return self._log_verb

    @log_verbosity_level.setter
    def log_verbosity_level(self, v):
        if not isinstance(v, int) or v < 0:
            raise _native.InvalidArgumentError(f"log_verbosity_level must be an int >= 0, got {v!r}")
        object.__setattr__(self, "_log_verb", v)

    @property
    def logid(self):
        return self._logid

    @logid.setter
    def logid(self, v):
        object.__setattr__(self, "_logid", str(v))

    use_deterministic_compute = _bool_option(
        "_deterministic", "Accepted: basalt's kernels split work into fixed chunks, so for a given thread count a "
        "run's results do not change from one run to the next (tests/python/test_ort_compat.py checks it).")

    # -- methods ----------------------------------------------------------------------------

    def add_session_config_entry(self, key, value):
        _check_config_entry(key, value)
        if key == "session.intra_op.allow_spinning" or key == "session.set_denormal_as_zero":
            _flag(key, value)
        if key in ("session.load_model_format", "session.save_model_format") and value.upper() != "ONNX":
            raise _native.UnsupportedError(f"{key}={value}: basalt reads and writes ONNX models only")
        self._config[key] = value

    def get_session_config_entry(self, key):
        if key not in self._config:
            raise _native.InvalidArgumentError(f"SessionOptions does not have configuration with key: {key}")
        return self._config[key]

    def add_free_dimension_override_by_name(self, dim_name, dim_value):
        self._free_by_name[str(dim_name)] = _dim_value(dim_name, dim_value)

    def add_free_dimension_override_by_denotation(self, dim_denotation, dim_value):
        self._free_by_denotation[str(dim_denotation)] = _dim_value(dim_denotation, dim_value)

    def add_initializer(self, name, ort_value):
        from ._session import OrtValue  # noqa: PLC0415 (cycle)
        if not isinstance(ort_value, OrtValue):
            raise TypeError(f"add_initializer takes an OrtValue, got {type(ort_value).__name__}")
        if not ort_value.is_tensor():
            raise _native.InvalidArgumentError(f"initializer '{name}': the OrtValue must hold a tensor")
        self._initializers[str(name)] = ort_value

    def add_external_initializers(self, names, ort_values):
        if len(names) != len(ort_values):
            raise _native.InvalidArgumentError("add_external_initializers: names and ort_values differ in length")
        for n, v in zip(names, ort_values):
            self.add_initializer(n, v)

    def register_custom_ops_library(self, library_path):
        path = os.fspath(library_path)
        if not os.path.exists(path):
            raise _native.BasaltIOError(f"custom op library '{path}' does not exist")
        raise _native.UnsupportedError(f"custom op library '{path}': basalt does not load custom operator libraries "
                                       "yet (the custom-ops work, issue 40); the model's custom ops cannot run")

    def add_provider(self, provider_name, provider_options=None):
        """onnxruntime 1.22's explicit provider list: the CPU provider is accepted (it is basalt), any
        other is not available here."""
        if provider_name != "CPUExecutionProvider":
            raise _native.UnsupportedError(f"provider '{provider_name}' is not available: basalt runs on the CPU "
                                           "(CPUExecutionProvider) only")

    def add_provider_for_devices(self, ep_devices, provider_options=None):
        if list(ep_devices):
            raise _native.UnsupportedError("basalt has no execution-provider devices (get_ep_devices() is empty)")

    def set_provider_selection_policy(self, policy):
        """Accepted: the one provider, the CPU, is always selected."""

    def has_providers(self):
        return False

    def set_load_cancellation_flag(self, value):
        """Accepted: a basalt load is not cancelled midway (loads take milliseconds to a few seconds)."""

    def __repr__(self):
        return (f"SessionOptions(intra_op_num_threads={self._o.threads}, graph_optimization_level={self._level.name}, "
                f"memory_limit={self._o.memory_limit}, enable_profiling={self.enable_profiling})")

    # -- the native options a session is created with ---------------------------------------

    def _native_options(self):
        """A copy of the native options with the onnxruntime settings mapped onto them, plus the
        arrays that must stay alive as long as the session (initializers used in place)."""
        o = _native.SessionOptions()
        for name in _NATIVE:
            setattr(o, name, getattr(self._o, name))
        o.graph_optimization_level = _LEVEL_TO_BASALT[int(self._level)]
        o.enable_profiling = self.enable_profiling
        if not self._arena or not self._reuse:
            o.memory_plan = False
        if not self._pattern:
            o.plan_cache_entries = 0
        if self._config.get("session.intra_op.allow_spinning") == "0":
            o.spin_us = 0
        if self._config.get("session.set_denormal_as_zero") == "1":
            o.denormals_as_zero = True
        o.optimized_model_path = self._optimized
        o.free_dimensions_by_name = dict(self._free_by_name)
        o.free_dimensions_by_denotation = dict(self._free_by_denotation)
        keep = [v._array for v in self._initializers.values()]
        o.set_initializers([(n, v._array) for n, v in self._initializers.items()])
        return o, keep


def _dim_value(name, v):
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise _native.InvalidArgumentError(f"free dimension override '{name}' must be an int >= 0, got {v!r}")
    return v


class RunOptions:
    """Per-run options: log levels and tag (accepted: basalt logs nothing per run), `terminate`
    (set from any thread to stop a run before its next node; the run raises a Fail), and run
    config entries."""

    __slots__ = ("_flag", "log_severity_level", "log_verbosity_level", "logid", "only_execute_path_to_fetches",
                 "training_mode", "synchronize_execution_providers", "_config")

    def __init__(self):
        self._flag = _native.TerminateFlag()
        self.log_severity_level = 2
        self.log_verbosity_level = 0
        self.logid = ""
        self.only_execute_path_to_fetches = False
        self.training_mode = False
        self.synchronize_execution_providers = True
        self._config = {}

    @property
    def terminate(self):
        return self._flag.is_set()

    @terminate.setter
    def terminate(self, v):
        self._flag.set(bool(v))

    def add_run_config_entry(self, key, value):
        _check_config_entry(key, value)
        self._config[key] = value

    def get_run_config_entry(self, key):
        if key not in self._config:
            raise _native.InvalidArgumentError(f"RunOptions does not have configuration with key: {key}")
        return self._config[key]

    def add_active_adapter(self, adapter):
        raise _native.UnsupportedError("basalt does not load LoRA adapters")

    def __repr__(self):
        return f"RunOptions(logid={self.logid!r}, terminate={self.terminate})"


class OrtArenaCfg:
    """Accepted for create_and_register_allocator; basalt sizes each run's arena from its plan."""

    def __init__(self, *args, **kwargs):
        self.config = dict(kwargs) if kwargs else (args[0] if args and isinstance(args[0], dict) else {})


class OrtMemoryInfo:
    """A memory description; basalt's memory is CPU memory."""

    def __init__(self, name="Cpu", alloc_type=1, device_id=0, mem_type=0):
        if str(name).lower() not in ("cpu", "cpuinput", "cpuoutput"):
            raise _native.InvalidArgumentError(f"memory '{name}': basalt has CPU memory only")
        self.name, self.alloc_type, self.device_id, self.mem_type = "Cpu", alloc_type, device_id, mem_type
