"""The operators: one <op>.cu (device code) and one <op>.py (host side) per op family.

Each <op>.py holds the reference, the cost model, one launcher per version, a registry of versions,
and one or more ``utils.build.KernelSource`` objects naming its .cu file; ``all_sources()`` finds
them for the CI compile check. Importing a kernels module never needs a GPU.
"""
from __future__ import annotations

import importlib
import pkgutil


def op_modules():
    """Every kernels/<op>.py module, imported."""
    import kernels
    return [importlib.import_module(f"kernels.{m.name}") for m in pkgutil.iter_modules(kernels.__path__)
            if not m.name.startswith("_")]


def all_sources():
    """Every KernelSource declared by a kernels module, as (module name, attribute, source)."""
    from utils.build import KernelSource
    out = []
    for mod in op_modules():
        for attr, val in vars(mod).items():
            if isinstance(val, KernelSource):
                out.append((mod.__name__, attr, val))
    return out
