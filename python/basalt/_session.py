"""InferenceSession, OrtValue, IOBinding and ModelMetadata with onnxruntime's names and behaviour."""
import ctypes
import datetime
import os
import threading
import warnings

import numpy as np

from . import _native
from ._options import RunOptions, SessionOptions

CPU = "CPUExecutionProvider"

# Every provider name onnxruntime 1.30 knows (get_all_providers); basalt has the CPU one.
ALL_PROVIDERS = [
    "TensorrtExecutionProvider", "CUDAExecutionProvider", "MIGraphXExecutionProvider", "ROCMExecutionProvider",
    "OpenVINOExecutionProvider", "DnnlExecutionProvider", "VitisAIExecutionProvider", "QNNExecutionProvider",
    "NnapiExecutionProvider", "VSINPUExecutionProvider", "JsExecutionProvider", "CoreMLExecutionProvider",
    "ArmNNExecutionProvider", "ACLExecutionProvider", "DmlExecutionProvider", "RknpuExecutionProvider",
    "WebNNExecutionProvider", "WebGpuExecutionProvider", "XnnpackExecutionProvider", "CANNExecutionProvider",
    "AzureExecutionProvider", "CPUExecutionProvider",
]
AVAILABLE_PROVIDERS = [CPU]

# ONNX TensorProto element types <-> numpy (onnxruntime's data_type() strings are "tensor(<name>)").
_ONNX_TYPES = {
    1: ("float", np.float32), 2: ("uint8", np.uint8), 3: ("int8", np.int8), 4: ("uint16", np.uint16),
    5: ("int16", np.int16), 6: ("int32", np.int32), 7: ("int64", np.int64), 8: ("string", np.object_),
    9: ("bool", np.bool_), 10: ("float16", np.float16), 11: ("double", np.float64), 12: ("uint32", np.uint32),
    13: ("uint64", np.uint64), 14: ("complex64", np.complex64), 15: ("complex128", np.complex128),
}
_NP_TO_ONNX = {np.dtype(t): k for k, (_, t) in _ONNX_TYPES.items() if t is not np.object_}


def _onnx_type_of(dtype):
    dt = np.dtype(dtype)
    if dt.kind in "OUS":
        return 8
    if dt in _NP_TO_ONNX:
        return _NP_TO_ONNX[dt]
    raise _native.InvalidArgumentError(f"numpy dtype {dt} has no ONNX equivalent")


def _numpy_dtype(element_type):
    """numpy dtype from onnxruntime's element_type argument: a numpy type, a dtype or an ONNX int."""
    if isinstance(element_type, (int, np.integer)) and not isinstance(element_type, bool):
        if int(element_type) not in _ONNX_TYPES:
            raise _native.InvalidArgumentError(f"element_type {int(element_type)} is not an ONNX type basalt holds")
        return np.dtype(_ONNX_TYPES[int(element_type)][1])
    try:
        return np.dtype(element_type)
    except TypeError:
        raise _native.InvalidArgumentError(f"element_type {element_type!r} is not a numpy or ONNX type") from None


def _check_device(device_type, device_id=0):
    name = str(device_type).lower()
    if name != "cpu":
        raise _native.InvalidArgumentError(f"device '{device_type}': basalt runs on the CPU only; use 'cpu'")
    if int(device_id) != 0:
        raise _native.InvalidArgumentError(f"device id {device_id}: the CPU has device id 0 only")


# ------------------------------------------------------------------------------- providers

def _normalize_providers(providers, provider_options):
    """onnxruntime's rules: names or (name, options) tuples; unavailable ones dropped with its
    warning; the CPU provider always runs what is left."""
    if providers is None:
        if provider_options is not None:
            raise ValueError("'provider_options' is given but 'providers' is not")
        return [CPU], [{}]
    if isinstance(providers, str):
        raise ValueError("'providers' must be a list of provider names, got a str")
    names, opts = [], []
    for p in providers:
        if isinstance(p, str):
            names.append(p)
            opts.append(None)
        elif isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], dict):
            names.append(p[0])
            opts.append(p[1])
        else:
            raise ValueError("'providers' values must be either strings or (string, dict) tuples.")
    if provider_options is not None:
        if any(o is not None for o in opts):
            raise ValueError("'providers' holds (name, options) tuples and 'provider_options' is also given")
        if len(provider_options) != len(names):
            raise ValueError("'providers' and 'provider_options' should be the same length if both are given.")
        opts = list(provider_options)
    if len(set(names)) != len(names):
        raise ValueError("'providers' has duplicate values.")
    kept_names, kept_opts = [], []
    for n, o in zip(names, opts):
        if n not in AVAILABLE_PROVIDERS:
            warnings.warn(f"Specified provider '{n}' is not in available provider names."
                          f"Available providers: '{', '.join(AVAILABLE_PROVIDERS)}'")
            continue
        if o is not None and not isinstance(o, dict):
            raise ValueError(f"provider options for '{n}' must be a dict")
        kept_names.append(n)
        kept_opts.append({str(k): str(v) for k, v in (o or {}).items()})
    if not kept_names:
        kept_names, kept_opts = [CPU], [{}]
    return kept_names, kept_opts


# ------------------------------------------------------------------------------- metadata

class ModelMetadata:
    """The model's description (InferenceSession.get_modelmeta)."""

    __slots__ = ("producer_name", "graph_name", "graph_description", "domain", "description", "version",
                 "custom_metadata_map")

    def __init__(self, d):
        self.producer_name = d["producer_name"]
        self.graph_name = d["graph_name"]
        self.graph_description = d["graph_description"]
        self.domain = d["domain"]
        self.description = d["description"]
        self.version = d["version"]
        self.custom_metadata_map = dict(d["custom_metadata_map"])

    def __repr__(self):
        return (f"ModelMetadata(producer_name={self.producer_name!r}, graph_name={self.graph_name!r}, "
                f"version={self.version}, custom_metadata_map={self.custom_metadata_map!r})")


# ------------------------------------------------------------------------------- OrtValue

class OrtValue:
    """A value on the CPU: a tensor (a numpy array, shared, not copied), a sequence of tensors, or
    an empty optional."""

    __slots__ = ("_array", "_seq", "__weakref__")

    def __init__(self, array=None, seq=None):
        self._array = array
        self._seq = seq

    @staticmethod
    def ortvalue_from_numpy(numpy_obj, device_type="cpu", device_id=0):
        _check_device(device_type, device_id)
        a = numpy_obj if isinstance(numpy_obj, np.ndarray) else np.asarray(numpy_obj)
        if a.dtype.kind not in "OUS":
            _onnx_type_of(a.dtype)
            if not (a.flags.c_contiguous and a.flags.aligned and a.dtype.isnative):
                a = np.ascontiguousarray(a, a.dtype.newbyteorder("="))
        return OrtValue(a)

    @staticmethod
    def ortvalue_from_numpy_with_onnx_type(data, onnx_element_type):
        dt = _numpy_dtype(onnx_element_type)
        a = np.asarray(data)
        if a.dtype != dt:
            raise _native.InvalidArgumentError(f"the array is {a.dtype}, onnx_element_type {onnx_element_type} is {dt}")
        return OrtValue.ortvalue_from_numpy(a)

    @staticmethod
    def ortvalue_from_shape_and_type(shape, element_type, device_type="cpu", device_id=0):
        _check_device(device_type, device_id)
        dims = [int(d) for d in shape]
        if any(d < 0 for d in dims):
            raise _native.InvalidArgumentError(f"shape {list(shape)} has a negative dimension")
        dt = _numpy_dtype(element_type)
        return OrtValue(np.empty(dims, dt) if dt.kind != "O" else np.full(dims, "", dtype=object))

    @staticmethod
    def ortvalue_from_sequence(values):
        return OrtValue(seq=[v._array if isinstance(v, OrtValue) else np.asarray(v) for v in values])

    def _value(self):
        """What the native run takes: the array, a list of arrays, or None."""
        return self._array if self._seq is None else self._seq

    def data_ptr(self):
        self._need_tensor("data_ptr")
        return self._array.ctypes.data

    def device_name(self):
        return "cpu"

    def shape(self):
        self._need_tensor("shape")
        return list(self._array.shape)

    def data_type(self):
        if self._seq is not None:
            inner = _ONNX_TYPES[_onnx_type_of(self._seq[0].dtype)][0] if self._seq else "float"
            return f"seq(tensor({inner}))"
        self._need_tensor("data_type")
        return f"tensor({_ONNX_TYPES[_onnx_type_of(self._array.dtype)][0]})"

    def element_type(self):
        self._need_tensor("element_type")
        return _onnx_type_of(self._array.dtype)

    def has_value(self):
        return self._array is not None or self._seq is not None

    def is_tensor(self):
        return self._array is not None

    def is_tensor_sequence(self):
        return self._seq is not None

    def is_sparse_tensor(self):
        return False

    def numpy(self):
        if self._seq is not None:
            raise _native.InvalidArgumentError("numpy() needs a tensor; this OrtValue is a sequence (use as_list())")
        self._need_tensor("numpy")
        return self._array

    def as_list(self):
        if self._seq is None:
            raise _native.InvalidArgumentError("as_list() needs a sequence OrtValue")
        return list(self._seq)

    def update_inplace(self, np_arr):
        self._need_tensor("update_inplace")
        src = np.asarray(np_arr)
        if src.shape != self._array.shape or src.dtype != self._array.dtype:
            raise _native.InvalidArgumentError(f"update_inplace: the array is {src.dtype}{list(src.shape)}, the "
                                               f"OrtValue is {self._array.dtype}{list(self._array.shape)}")
        np.copyto(self._array, src)

    def as_sparse_tensor(self):
        raise _native.UnsupportedError("basalt has no sparse OrtValues")

    def _need_tensor(self, what):
        if self._array is None:
            raise _native.InvalidArgumentError(f"{what}() needs a tensor OrtValue; this one "
                                               f"{'is a sequence' if self._seq is not None else 'holds no value'}")

    def __repr__(self):
        if self._array is not None:
            return f"OrtValue({self.data_type()}, shape={self.shape()})"
        return "OrtValue(sequence)" if self._seq is not None else "OrtValue(None)"


class SparseTensor:
    """onnxruntime's SparseTensor: not supported (basalt densifies sparse initializers at load)."""

    def __init__(self, *args, **kwargs):
        raise _native.UnsupportedError("basalt has no SparseTensor inputs or outputs; pass dense numpy arrays")


class OrtDevice:
    """A device description; basalt has the CPU only."""

    _CPU = 0

    def __init__(self, device_type="cpu", device_id=0):
        _check_device(device_type, device_id)

    @staticmethod
    def make(ort_device_name, device_id):
        return OrtDevice(ort_device_name, device_id)

    @staticmethod
    def cpu():
        return OrtDevice._CPU

    def device_id(self):
        return 0

    def device_type(self):
        return OrtDevice._CPU


def _wrap(v):
    if isinstance(v, list):
        return OrtValue(seq=v)
    return OrtValue(v)


# ------------------------------------------------------------------------------- IOBinding

class IOBinding:
    """Inputs and outputs bound once and reused by every InferenceSession.run_with_iobinding.

    An output bound with a buffer (bind_output with buffer_ptr, bind_ortvalue_output) is written in
    place by the kernel that produces it: a run then allocates nothing for it. An output bound by
    name only gets a fresh array each run, returned by get_outputs()."""

    def __init__(self, session):
        self._sess = session
        self._inputs = {}
        self._outputs = []     # names, in bind order
        self._buffers = {}     # name -> preallocated array
        self._results = {}     # name -> OrtValue of the last run

    # -- inputs
    def bind_cpu_input(self, name, arr_on_cpu):
        self._inputs[name] = arr_on_cpu if isinstance(arr_on_cpu, np.ndarray) else np.asarray(arr_on_cpu)

    def bind_input(self, name, device_type, device_id, element_type, shape, buffer_ptr):
        _check_device(device_type, device_id)
        self._inputs[name] = _array_at(buffer_ptr, element_type, shape, f"input '{name}'")

    def bind_ortvalue_input(self, name, ortvalue):
        if not isinstance(ortvalue, OrtValue):
            raise TypeError(f"bind_ortvalue_input takes an OrtValue, got {type(ortvalue).__name__}")
        self._inputs[name] = ortvalue._value()

    # -- outputs
    def bind_output(self, name, device_type="cpu", device_id=0, element_type=None, shape=None, buffer_ptr=None):
        _check_device(device_type, device_id)
        self._known_output(name)
        if buffer_ptr is None:
            if element_type is not None or shape is not None:
                raise _native.InvalidArgumentError(f"output '{name}': element_type and shape come with buffer_ptr")
            self._buffers.pop(name, None)
        else:
            if element_type is None or shape is None:
                raise _native.InvalidArgumentError(f"output '{name}': a buffer_ptr needs element_type and shape")
            self._buffers[name] = _array_at(buffer_ptr, element_type, shape, f"output '{name}'")
        if name not in self._outputs:
            self._outputs.append(name)

    def bind_ortvalue_output(self, name, ortvalue):
        if not isinstance(ortvalue, OrtValue) or not ortvalue.is_tensor():
            raise TypeError("bind_ortvalue_output takes a tensor OrtValue")
        self._known_output(name)
        self._buffers[name] = ortvalue._array
        if name not in self._outputs:
            self._outputs.append(name)

    def _known_output(self, name):
        if name not in self._sess._output_names:
            raise _native.InvalidArgumentError(f"unknown output '{name}'; the model's outputs are: "
                                               f"{', '.join(self._sess._output_names)}")

    # -- results
    def get_outputs(self):
        return [self._results[n] for n in self._outputs if n in self._results]

    def get_outputs_as_ortvaluevector(self):
        return self.get_outputs()

    def copy_outputs_to_cpu(self):
        return [np.array(v._array, copy=True) if v.is_tensor() else v._value() for v in self.get_outputs()]

    def clear_binding_inputs(self):
        self._inputs.clear()

    def clear_binding_outputs(self):
        self._outputs.clear()
        self._buffers.clear()
        self._results.clear()

    def synchronize_inputs(self):
        """Accepted: CPU memory needs no synchronization."""

    def synchronize_outputs(self):
        """Accepted: CPU memory needs no synchronization."""

    def _run(self, terminate):
        outs = self._sess._s.run_bound(self._buffers, self._inputs, terminate)
        names = self._sess._output_names
        results = self._results
        for n in self._outputs:
            buf = self._buffers.get(n)
            if buf is not None:
                prev = results.get(n)
                if prev is None or prev._array is not buf:
                    results[n] = OrtValue(buf)
            else:
                results[n] = _wrap(outs[names.index(n)])


def _array_at(buffer_ptr, element_type, shape, what):
    """A numpy array over memory the caller owns (onnxruntime's buffer_ptr arguments)."""
    dt = _numpy_dtype(element_type)
    if dt.kind == "O":
        raise _native.InvalidArgumentError(f"{what}: string tensors cannot be bound to a buffer")
    dims = [int(d) for d in shape]
    if any(d < 0 for d in dims):
        raise _native.InvalidArgumentError(f"{what}: shape {list(shape)} has a negative dimension")
    n = int(np.prod(dims, dtype=np.int64)) * dt.itemsize
    if not isinstance(buffer_ptr, int) or (buffer_ptr == 0 and n > 0):
        raise _native.InvalidArgumentError(f"{what}: buffer_ptr must be a non-null address (int)")
    if n == 0:
        return np.empty(dims, dt)
    raw = (ctypes.c_char * n).from_address(buffer_ptr)
    return np.frombuffer(raw, dtype=dt, count=n // dt.itemsize).reshape(dims)


# ------------------------------------------------------------------------------- session

class InferenceSession:
    """A loaded model, with onnxruntime's InferenceSession API. Immutable after creation; run() may
    be called from many threads at once (it releases the GIL)."""

    def __init__(self, path_or_bytes, sess_options=None, providers=None, provider_options=None, **kwargs):
        unknown = set(kwargs) - {"disabled_optimizers"}
        if unknown:
            raise TypeError(f"InferenceSession() got unexpected keyword arguments: {', '.join(sorted(unknown))}")
        if sess_options is None:
            sess_options = SessionOptions()
        elif not isinstance(sess_options, SessionOptions):
            raise TypeError(f"sess_options must be a SessionOptions, got {type(sess_options).__name__}")
        self._sess_options = sess_options
        self._providers, self._provider_options = _normalize_providers(providers, provider_options)
        self._fallback = True
        self._disabled_optimizers = list(kwargs.get("disabled_optimizers") or [])
        native, self._keep = sess_options._native_options()
        if self._provider_options[0].get("use_arena") == "0":
            native.memory_plan = False
        self._profile_default = False
        if sess_options.enable_profiling and not native.profile_path:
            # onnxruntime's file name: <prefix>_<date>_<time>.json in the working directory
            stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
            native.profile_path = f"{sess_options.profile_file_prefix}_{stamp}.json"
            self._profile_default = True
        self._model_path = None if isinstance(path_or_bytes, (bytes, bytearray, memoryview)) else os.fspath(path_or_bytes)
        self._s = _native.Session(path_or_bytes, native)
        self._native_options = native
        self._output_names = [o.name for o in self._s.get_outputs()]
        self._inputs_meta = self._s.get_inputs()

    # -- metadata
    def get_inputs(self):
        return [i for i in self._inputs_meta if not i.has_default]

    def get_overridable_initializers(self):
        return [i for i in self._inputs_meta if i.has_default]

    def get_outputs(self):
        return self._s.get_outputs()

    def get_modelmeta(self):
        return ModelMetadata(self._s.metadata())

    def get_session_options(self):
        return self._sess_options

    def get_providers(self):
        return list(self._providers)

    def get_provider_options(self):
        return {n: dict(o) for n, o in zip(self._providers, self._provider_options)}

    def set_providers(self, providers=None, provider_options=None):
        self._providers, self._provider_options = _normalize_providers(providers, provider_options)

    def disable_fallback(self):
        self._fallback = False

    def enable_fallback(self):
        self._fallback = True

    # -- runs
    def run(self, output_names, input_feed, run_options=None):
        return self._s.run(output_names, input_feed, _terminate(run_options))

    def run_async(self, output_names, input_feed, callback, user_data, run_options=None):
        """Runs on a new thread and calls callback(outputs, user_data, error_message) there:
        outputs is the list run() returns, or None with the error's message when it failed."""
        if not callable(callback):
            raise TypeError("callback must be callable")

        def work():
            try:
                outs = self.run(output_names, input_feed, run_options)
            except Exception as e:  # noqa: BLE001 (reported to the callback as onnxruntime does)
                callback(None, user_data, str(e))
                return
            callback(outs, user_data, "")

        threading.Thread(target=work, daemon=True).start()

    def run_with_ort_values(self, output_names, input_dict_ort_values, run_options=None):
        if not isinstance(input_dict_ort_values, dict):
            raise TypeError("input_dict_ort_values must be a dict {input name: OrtValue}")
        feed = {}
        for k, v in input_dict_ort_values.items():
            if not isinstance(v, OrtValue):
                raise TypeError(f"input '{k}': expected an OrtValue, got {type(v).__name__}")
            feed[k] = v._value()
        return [_wrap(v) for v in self._s.run(output_names, feed, _terminate(run_options))]

    def io_binding(self):
        return IOBinding(self)

    def run_with_iobinding(self, iobinding, run_options=None):
        if not isinstance(iobinding, IOBinding) or iobinding._sess is not self:
            raise TypeError("run_with_iobinding takes an IOBinding made by this session's io_binding()")
        iobinding._run(_terminate(run_options))

    # -- profiling
    def end_profiling(self, path=None):
        """Writes the profile (a Chrome trace) and returns its file name; "" when profiling is off."""
        if not self._native_options.enable_profiling and not self._native_options.profile_path:
            return ""
        return self._s.end_profiling(os.fspath(path) if path else "")

    def get_profiling_start_time_ns(self):
        return self._s.profiling_start_ns()

    def get_tuning_results(self):
        """Accepted: basalt has no kernel tuning results to export."""
        return []

    def set_tuning_results(self, results, error_on_invalid=False):
        """Accepted: basalt has no kernel tuning to import."""

    # -- basalt's own
    def memory_stats(self):
        return self._s.memory_stats()

    def pool_stats(self):
        return self._s.pool_stats()

    def plan_memory(self, shapes):
        return self._s.plan_memory(shapes)

    def run_into(self, outputs, input_feed, run_options=None):
        """IO binding in one call: writes each output named in `outputs` ({name: numpy array},
        C-contiguous, writable, exactly the output's dtype and shape) in place."""
        if not isinstance(outputs, dict):
            raise TypeError("outputs must be a dict {output name: numpy array}")
        self._s.run_bound(outputs, input_feed, _terminate(run_options))

    @property
    def options(self):
        return self._native_options


def _terminate(run_options):
    if run_options is None:
        return None
    if not isinstance(run_options, RunOptions):
        raise TypeError(f"run_options must be a RunOptions or None, got {type(run_options).__name__}")
    return run_options._flag
