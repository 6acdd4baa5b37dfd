"""Names a package resolves when they are first read (PEP 562): the one way simcore's and simllm's
package roots keep numba out of ``import simllm``. Plain Python; imports nothing compiled."""
import importlib


def lazy_names(namespace, homes):
    """A package's module-level ``__getattr__`` and ``__dir__`` for the names of ``homes``.

    Parameters
    ----------
    namespace : dict
        The package's ``globals()``: a name read once is stored there, so later reads are plain.
    homes : dict of str to tuple of str
        Each defining module's dotted name and the public names it gives the package.

    Returns
    -------
    home_of : dict of str to str
        Each lazy name's module.
    getattr_, dir_ : callable
        Assign them to the package's ``__getattr__`` and ``__dir__``: the first imports a name's
        module (and numba with it, for a kernel) when the name is first read, and raises
        AttributeError for any other name; the second lists the package's names, lazy ones included.
    """
    home_of = {name: module for module, names in homes.items() for name in names}
    package = namespace["__name__"]

    def getattr_(name):
        module = home_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def dir_():
        return sorted(set(namespace) | set(namespace.get("__all__", ())) | set(home_of))

    return home_of, getattr_, dir_
