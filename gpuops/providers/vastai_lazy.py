"""vastai's API layer without the package's own start-up.

``import vastai.api.offers`` runs ``vastai/__init__.py`` first, and that imports the serverless
SDK (aiohttp, pycryptodome, psutil, setuptools' distutils ...): about 1.1 s of the 1.25 s the
adapter paid before its first request (``python -X importtime``), none of it used: the adapter
calls only ``vastai.api`` (client, offers, instances, keys) and ``vastai.utils``.

``install()`` puts a stand-in for the ``vastai`` package in ``sys.modules``: the real package's
path and spec, so every submodule imports exactly as before, but without its ``__init__``. The
first time anyone asks the package for a name it does not hold yet (``from vastai import
VastAI``), the real ``__init__`` runs, once, into the same module, so nothing else sees a
difference. Only the CLI's market session installs it; a process that imported vastai already
keeps the real one.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
import types


class _LazyPackage(types.ModuleType):
    """The ``vastai`` package, its ``__init__`` deferred until a name it defines is wanted."""

    _lock = threading.RLock()
    _started = False

    def __getattr__(self, name: str) -> object:
        if name.startswith("__"):
            raise AttributeError(name)
        with self._lock:
            if not type(self)._started:
                type(self)._started = True
                spec = self.__spec__
                assert spec is not None and spec.loader is not None
                spec.loader.exec_module(self)
        try:
            return self.__dict__[name]
        except KeyError:
            raise AttributeError(f"module 'vastai' has no attribute {name!r}") from None


def install() -> bool:
    """Stand in for ``vastai`` unless it is imported already (or missing: the adapter's own
    import then fails as it always did). Whether the stand-in is in place."""
    if "vastai" in sys.modules:
        return isinstance(sys.modules["vastai"], _LazyPackage)
    spec = importlib.util.find_spec("vastai")
    if spec is None or spec.submodule_search_locations is None:
        return False
    package = _LazyPackage("vastai")
    package.__spec__ = spec
    package.__loader__ = spec.loader
    package.__file__ = spec.origin
    package.__path__ = list(spec.submodule_search_locations)
    package.__package__ = "vastai"
    sys.modules["vastai"] = package
    return True
