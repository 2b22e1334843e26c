"""A stand-in package (`triton`, `torchvision`) for the CPU-only SGLang harness.

`scripts/setup_sglang_cpu.sh` copies this file to `.cache/sglang-cpu/stubs/<name>/__init__.py`;
the stubbed name is the module's own `__name__`. SGLang imports triton (and, in some
releases, torchvision) at module top but never runs a kernel while parsing arguments or
calling override functions, so a module whose every attribute is another stub (and whose call
is a pass-through decorator) is enough, and saves a 1 GB download and a torchvision build that
matches the CPU torch. SGLang ships the same idea for macOS in `sglang/_platform_stubs.py`.
Stdlib only.
"""

from __future__ import annotations

import importlib.machinery
import sys
import types

__version__ = "0.0.0+servetune.stub"


class _StubMeta(type):
    """Stub classes answer any attribute with another stub class (`InterpolationMode.BILINEAR`)."""

    def __getattr__(cls, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _StubMeta(name, (_StubBase,), {"__module__": cls.__module__})


class _StubBase(metaclass=_StubMeta):
    """What CamelCase stub attributes resolve to, so that code may subclass them."""


class _StubModule(types.ModuleType):
    """A module whose attributes are stubs; calling it acts as a (parametrised) decorator."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.__path__: list[str] = []
        self.__package__ = name
        self.__spec__ = importlib.machinery.ModuleSpec(name, _FINDER, is_package=True)
        self.__version__ = __version__

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        full = f"{self.__name__}.{name}"
        if full in sys.modules:
            return sys.modules[full]
        if name[:1].isupper():
            value: object = _StubMeta(name, (_StubBase,), {"__module__": self.__name__})
        else:
            value = _StubModule(full)
            sys.modules[full] = value
        setattr(self, name, value)
        return value

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return lambda fn: fn

    def __bool__(self) -> bool:
        return False

    def __iter__(self):
        return iter(())

    def __repr__(self) -> str:
        return f"<triton-stub {self.__name__!r}>"


class _StubFinder:
    """Answers every `import <root>.<sub>` with a stub module."""

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith(_ROOT + "."):
            return None
        module = sys.modules.get(fullname)
        if module is None:
            module = _StubModule(fullname)
            sys.modules[fullname] = module
            parent, _, child = fullname.rpartition(".")
            if parent in sys.modules:
                setattr(sys.modules[parent], child, module)
        return module.__spec__

    def create_module(self, spec):
        return sys.modules[spec.name]

    def exec_module(self, module) -> None:
        return None


class _Config:
    """`triton.Config`, as used by `@triton.autotune(configs=[...])`."""

    def __init__(self, kwargs=None, num_warps=4, num_stages=2, **extra) -> None:
        self.kwargs = kwargs or {}
        self.num_warps = num_warps
        self.num_stages = num_stages


_ROOT = __name__
_FINDER = _StubFinder()

if "." not in _ROOT:  # installed as a top-level package; imported as servetune's module it does nothing
    sys.meta_path.insert(0, _FINDER)
    _root = _StubModule(_ROOT)
    _root.__file__ = __file__
    if _ROOT == "triton":
        _root.Config = _Config
        _root.cdiv = lambda a, b: -(a // -b)
        _root.next_power_of_2 = lambda n: 1 << (n - 1).bit_length() if n > 0 else 1
    sys.modules[_ROOT] = _root
