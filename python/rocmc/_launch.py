"""Calling a loaded module: its signature from the launch document, sizes
from the arguments' shapes, arrays in and out of device buffers."""

import json
from dataclasses import dataclass

import numpy as np

from . import _rocmc

# The launch document's dtypes as NumPy's; bf16 and the 8-bit floats have
# no NumPy type and travel as their bits (uint16, uint8).
_NUMPY = {
    "f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": np.uint16,
    "i8": np.int8, "u8": np.uint8, "i32": np.int32, "u32": np.uint32, "i64": np.int64,
    "bool": np.bool_, "f8e4m3fn": np.uint8, "f8e5m2": np.uint8,
    "f8e4m3fnuz": np.uint8, "f8e5m2fnuz": np.uint8,
}


def _eval(e, sizes):
    """An extent of the launch document (``{"size": "n"}``, ``{"ceil_div": [a, b]}``, ...)."""
    (op, v), = e.items()
    if op == "const":
        return v
    if op == "size":
        return sizes[v]
    a, b = _eval(v[0], sizes), _eval(v[1], sizes)
    return {
        "add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b,
        "div": lambda: a // b, "ceil_div": lambda: -((-a) // b), "mod": lambda: a % b,
        "min": lambda: min(a, b), "max": lambda: max(a, b), "xor": lambda: a ^ b,
    }[op]()


def _text(e):
    (op, v), = e.items()
    if op in ("const", "size"):
        return str(v)
    return f"{op}({_text(v[0])}, {_text(v[1])})"


@dataclass(frozen=True)
class Arg:
    """One argument of a kernel: ``role`` is ``buffer``, ``size`` or ``scalar``."""
    name: str
    role: str
    dtype: str
    shape: tuple = ()
    written: bool = False

    def __str__(self):
        if self.role == "buffer":
            dims = ", ".join(_text(e) for e in self.shape)
            return f"{self.name}: {'out ' if self.written else ''}{self.dtype}[{dims}]"
        return f"{self.name}: {self.dtype}"


class Signature:
    """The arguments a call takes, in order: buffers (as the kernels first
    use them), then sizes, then scalar parameters."""

    def __init__(self, doc):
        seen = {}
        for k in doc["kernels"]:
            for a in k["args"]:
                prev = seen.get(a["name"])
                written = a.get("written", False) or (prev is not None and prev.written)
                if prev is None or written != prev.written:
                    seen[a["name"]] = Arg(a["name"], a["role"], a["dtype"],
                                          tuple(a.get("shape", ())), written)
        order = {"buffer": 0, "size": 1, "scalar": 2}
        self.args = sorted(seen.values(), key=lambda a: order[a.role])
        self.kernels = [k["name"] for k in doc["kernels"]]

    def __iter__(self):
        return iter(self.args)

    def __str__(self):
        return "(" + ", ".join(str(a) for a in self.args) + ")"


# PyTorch's dtypes by rocmc's names (the 8-bit floats as PyTorch spells them).
_TORCH = {
    "f32": "float32", "f64": "float64", "f16": "float16", "bf16": "bfloat16",
    "i8": "int8", "u8": "uint8", "i32": "int32", "u32": "uint32", "i64": "int64",
    "bool": "bool", "f8e4m3fn": "float8_e4m3fn", "f8e5m2": "float8_e5m2",
    "f8e4m3fnuz": "float8_e4m3fnuz", "f8e5m2fnuz": "float8_e5m2fnuz",
}


class _OnDevice:
    """A PyTorch tensor in the device's own memory, used in place."""

    __slots__ = ("tensor", "shape", "ndim", "size", "nbytes", "dtype", "address", "index")

    def __init__(self, name, t, index):
        if not t.is_contiguous():
            raise ValueError(f"{name}: a GPU tensor must be contiguous (call .contiguous())")
        self.tensor = t
        self.shape = t.shape
        self.ndim = len(self.shape)
        self.size = t.numel()
        self.nbytes = self.size * t.element_size()
        self.dtype = str(t.dtype)[6:]
        self.address = t.data_ptr()
        self.index = index


def _array(name, value, arg, cuda, index):
    """``value`` as a NumPy array sharing its memory where it can (NumPy,
    PyTorch CPU tensors, DLPack on the CPU), or a GPU tensor of the
    device (``cuda:index`` when ``cuda``) used in place."""
    if type(value) is np.ndarray:
        return value
    mod = type(value).__module__
    if mod.startswith("torch"):
        if value.is_cuda:
            if not cuda or (value.device.index or 0) != index:
                raise TypeError(
                    f"{name}: a tensor on {value.device}, and the kernel is loaded on "
                    f"{'cuda:' + str(index) if cuda else 'a device that is not it'}; "
                    "pass tensors of that device, or host memory (copied)")
            return _OnDevice(name, value, index)
        if str(value.dtype) == "torch.bfloat16":
            return value.detach().view(dtype=__import__("torch").int16).numpy().view(np.uint16)
        return value.detach().numpy()
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "__dlpack__"):
        return np.from_dlpack(value)
    if arg.written:
        raise TypeError(f"{name}: an output needs an array to write into, got {type(value).__name__}")
    return np.asarray(value)


class Kernel:
    """A module loaded on a device, called with its arguments by name (or
    in :attr:`signature` order): ``kernel(A=a, B=b, C=c)``. Every GPU
    kernel of the module runs in order; written buffers are copied back
    into the arrays given for them."""

    def __init__(self, device, module):
        self.device = device
        self._module, doc = device._dev.load(module)
        self.launch_document = json.loads(doc)
        self.signature = Signature(self.launch_document)
        # What every call needs, worked out once: a call's host cost is
        # what a launch from Python adds to PyTorch's own.
        sig = self.signature.args
        self._names = [a.name for a in sig if a.role != "size"]
        self._known = {a.name for a in sig}
        self._sizes_named = [a.name for a in sig if a.role == "size"]
        self._buffers = [(a, np.dtype(_NUMPY[a.dtype]), _TORCH[a.dtype]) for a in sig if a.role == "buffer"]
        self._scalars = [(a.name, a.dtype) for a in sig if a.role == "scalar"]
        self._plan = device._dev.plan(doc, [a.name for a, _, _ in self._buffers],
                                      self._sizes_named, [n for n, _ in self._scalars])
        self._cuda = device.info["name"].startswith("cuda")
        self._index = int(device.info["name"].partition(":")[2] or 0) if self._cuda else -1

    def __repr__(self):
        return f"rocmc.Kernel{self.signature} on {self.device.info['name']}"

    def _bind(self, args, kwargs):
        names = self._names
        if len(args) > len(names):
            raise TypeError(f"{len(args)} positional arguments for {len(names)}: {self.signature}")
        bound = dict(zip(names, args))
        for k, v in kwargs.items():
            if k in bound:
                raise TypeError(f"{k} given twice")
            if k not in self._known:
                raise TypeError(f"no argument `{k}`; the kernel takes {self.signature}")
            bound[k] = v
        return bound

    def _sizes(self, bound, arrays):
        sizes = {s: int(bound[s]) for s in self._sizes_named if s in bound}
        for a, _, _ in self._buffers:
            arr = arrays.get(a.name)
            if arr is None or arr.ndim != len(a.shape):
                continue
            for e, d in zip(a.shape, arr.shape):
                s = e.get("size")
                if s is not None and sizes.setdefault(s, d) != d:
                    raise ValueError(f"{a.name}: size {s} is {sizes[s]} elsewhere but {d} here (shape {arr.shape})")
        missing = [s for s in self._sizes_named if s not in sizes]
        if missing:
            raise TypeError(f"sizes {', '.join(missing)} are neither given nor read off an argument's shape")
        return sizes

    def __call__(self, *args, **kwargs):
        bound = self._bind(args, kwargs)
        if len(bound) < len(self._names):
            missing = [n for n in self._names if n not in bound]
            raise TypeError(f"missing {', '.join(missing)}; the kernel takes {self.signature}")
        arrays = {a.name: _array(a.name, bound[a.name], a, self._cuda, self._index)
                  for a, _, _ in self._buffers}
        sizes = self._sizes(bound, arrays)
        dev = self.device._dev
        bufs, ids, held = [], {}, []
        stream, copied, copy_back = 0, False, []
        try:
            for a, np_type, torch_type in self._buffers:
                arr = arrays[a.name]
                on_device = type(arr) is _OnDevice
                want = torch_type if on_device else np_type
                if arr.dtype != want:
                    raise TypeError(f"{a.name}: {arr.dtype} array where the kernel takes {a.dtype} ({want})")
                n = 1
                for e in a.shape:
                    n *= _eval(e, sizes)
                if arr.size != n:
                    raise ValueError(f"{a.name}: {arr.size} elements where {a} holds {n} with {sizes}")
                if on_device:
                    if not stream:
                        stream = _torch_stream(arr.index)
                    bufs.append((1, arr.address, arr.nbytes, n))
                    continue
                if a.written:
                    if not (arr.flags.c_contiguous and arr.flags.writeable):
                        raise ValueError(f"{a.name}: an output must be a writeable C-contiguous array")
                    copy_back.append(a.name)
                # The same memory under two names is one device buffer.
                key = (arr.__array_interface__["data"][0], arr.nbytes, arr.dtype.str)
                if key not in ids:
                    ids[key] = dev.upload(np.ascontiguousarray(arr).tobytes())
                    held.append(ids[key])
                    copied = True
                ids[a.name] = ids[key]
                bufs.append((0, ids[key], arr.nbytes, n))
            # Host copies finish before kernels on PyTorch's stream start (a
            # copy from pageable memory may still be in flight on return).
            if stream and copied:
                dev.synchronize()
            # One crossing into Rust: GPU tensors imported for the call,
            # every kernel launched on PyTorch's current stream, in order.
            dev.call(self._module, self._plan, bufs, [sizes[s] for s in self._sizes_named],
                     [_scalar(d, bound[n]) for n, d in self._scalars], stream)
            if stream and copy_back:
                dev.synchronize()
            for name in copy_back:
                out = arrays[name]
                got = np.frombuffer(dev.read(ids[name]), dtype=out.dtype).reshape(out.shape)
                np.copyto(out, got)
        finally:
            for b in held:
                dev.free(b)


def _torch_stream(index):
    """PyTorch's current stream on device ``index``, as a ``CUstream``."""
    import torch
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw(index)
    return torch.cuda.current_stream(index).cuda_stream


def _scalar(dtype, v):
    """A scalar parameter's little-endian bytes."""
    if dtype == "bf16":
        bits = np.array(v, np.float32).view(np.uint32)
        # Round to nearest even, as the kernels' own conversions do.
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        return np.array(bits, np.uint16).tobytes()
    if dtype == "bool":
        return bytes([1 if v else 0])
    return np.array(v, _NUMPY[dtype]).tobytes()
