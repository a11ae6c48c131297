"""rocmc from Python: compile kernel files for a target, load them on a
device (``cpu``, ``cuda:N``, ``amdgpu:N``) and call them on NumPy arrays,
PyTorch CPU tensors or anything with DLPack.

    import numpy as np, rocmc
    code = rocmc.compile("vadd.toml", target="x86-64")   # or source=..., target="sm_90"
    dev = rocmc.device("cpu")
    vadd = dev.load(code)
    a = np.ones(1000, np.float32); c = np.empty_like(a)
    vadd(A=a, B=a, C=c)          # sizes from the shapes; C written in place

Every launch is checked against the launch document the module carries
(the kernel, the number, kinds, dtypes and lengths of the arguments) by
the same Rust code the other runtimes use, before anything runs.
"""

from . import _rocmc
from ._launch import Kernel, Signature, Arg

__version__ = _rocmc.version()
__all__ = ["compile", "device", "devices", "Device", "Kernel", "Signature", "Arg", "RocmcError"]

RocmcError = _rocmc.RocmcError


def compile(path=None, *, source=None, target, tune=None, name="kernel.toml"):
    """The module of a kernel file for one target, as bytes: an AMD code
    object (``gfx942``), PTX text (``sm_90``) or a CPU shared object
    (``x86-64``). ``path`` is a kernel file; or give its text as ``source``
    (``name`` is the file name its errors cite). ``tune``: knob values as
    ``rocmc build --tune`` takes them (``"Y_BM=64,Y_BN=128"``). A mistake in
    the kernel raises RocmcError with the file, line and column."""
    if (path is None) == (source is None):
        raise TypeError("rocmc.compile takes a path or source=, not both")
    if source is None:
        name = str(path)
        with open(path, encoding="utf-8") as f:
            source = f.read()
    if not hasattr(_rocmc, "compile"):
        raise RocmcError("this build of rocmc has no compiler (runtime only): load modules compiled elsewhere")
    return _rocmc.compile(source, name, target, tune or "")


def devices():
    """The devices of this machine: a list of dicts (name, target, description, memory)."""
    return _rocmc.devices()


def device(name="cpu"):
    """Opens a device by name: ``cpu``, ``cuda:N``, ``amdgpu:N``."""
    return Device(name)


class Device:
    """One device; modules load on it and run there."""

    def __init__(self, name="cpu"):
        self._dev = _rocmc.Device(name)

    @property
    def info(self):
        """name, target, description, memory."""
        return self._dev.info()

    @property
    def target(self):
        """Its ``--mcpu``, what to compile for."""
        return self._dev.info()["target"]

    def load(self, module):
        """Loads module bytes (from :func:`compile`, or a .hsaco, .hipfb,
        .ptx or .so file's bytes) and returns the callable :class:`Kernel`."""
        if isinstance(module, str):
            module = module.encode()
        return Kernel(self, bytes(module))

    def synchronize(self):
        self._dev.synchronize()

    def __repr__(self):
        i = self.info
        return f"rocmc.Device({i['name']!r}: {i['target']}, {i['description']})"
