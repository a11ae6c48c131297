"""A rocmc kernel as a PyTorch operator (``torch.library``), so it can sit
inside a model, under ``torch.compile`` too:

    vadd = rocmc.device("cuda:0").load(ptx)
    op = rocmc.torch.op(vadd, "mylib::vadd")      # (Tensor A, Tensor B) -> Tensor
    c = op(a, b)                                  # outputs allocated, returned
    torch.compile(lambda a, b: op(a, b) * 2)(a, b)

Inputs are the buffers the kernel does not write, then its scalar
parameters, in signature order; the outputs (written buffers) are
allocated with the shapes the launch document gives for the inputs'
sizes and returned (a tuple when there are several). The operator runs
where the kernel was loaded: CUDA tensors for a ``cuda:N`` device, CPU
tensors for ``cpu``. A fake implementation gives ``torch.compile`` the
outputs' shapes and dtypes without running anything.
"""

import torch

from ._launch import _TORCH, _eval

_SCALAR = {"f32": "float", "f64": "float", "f16": "float", "bf16": "float",
           "i8": "int", "u8": "int", "i32": "int", "u32": "int", "i64": "int", "bool": "bool"}
_libraries = {}


def op(kernel, qualname):
    """Registers ``kernel`` as the operator ``namespace::name`` and returns it."""
    ns, _, name = qualname.partition("::")
    if not ns or not name:
        raise ValueError(f"{qualname!r}: an operator is named namespace::name")
    sig = kernel.signature.args
    ins = [a for a in sig if a.role == "buffer" and not a.written]
    outs = [a for a in sig if a.role == "buffer" and a.written]
    scalars = [a for a in sig if a.role == "scalar"]
    if not outs:
        raise ValueError(f"{qualname}: the kernel writes no buffer, so the operator would return nothing")
    params = [f"Tensor {a.name}" for a in ins] + [f"{_SCALAR[a.dtype]} {a.name}" for a in scalars]
    ret = "Tensor" if len(outs) == 1 else "(" + ", ".join("Tensor" for _ in outs) + ")"
    lib = _libraries.get(ns)
    if lib is None:
        lib = _libraries[ns] = torch.library.Library(ns, "FRAGMENT")
    lib.define(f"{name}({', '.join(params)}) -> {ret}")

    def outputs(tensors):
        # The sizes as a call reads them off its arguments' shapes.
        s = kernel._sizes({}, {a.name: t for a, t in zip(ins, tensors)})
        return [torch.empty([_eval(e, s) for e in a.shape], dtype=getattr(torch, _TORCH[a.dtype]),
                            device=tensors[0].device if tensors else None) for a in outs]

    def returned(res):
        return res[0] if len(res) == 1 else tuple(res)

    def run(*args):
        tensors, values = args[:len(ins)], args[len(ins):]
        res = outputs(tensors)
        kernel(**{a.name: t for a, t in zip(ins, tensors)},
               **{a.name: r for a, r in zip(outs, res)},
               **{a.name: v for a, v in zip(scalars, values)})
        return returned(res)

    def fake(*args):
        # Shapes and dtypes only, for torch.compile: nothing runs.
        return returned(outputs(args[:len(ins)]))

    key = "CUDA" if kernel.device.info["name"].startswith("cuda") else "CPU"
    lib.impl(name, run, key)
    torch.library.register_fake(qualname, fake, lib=lib)
    return getattr(getattr(torch.ops, ns), name)
