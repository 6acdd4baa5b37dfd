"""griffe extension for the API reference: Sphinx cross-reference roles in simllm's docstrings
(``:class:`ServingConfig```, ``:data:`FIRST_TOKEN```, ``:func:`~simllm.sim.simulate.simulate```)
become inline code, which mkdocs renders; left alone they show as literal ``:class:`` text."""
import re

from griffe import Extension

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|data|attr|mod|obj|exc|const|term):`~?([^`]+)`")


class RstRoles(Extension):
    """Rewrite each object's docstring once it is loaded."""

    def on_instance(self, *, obj, **kwargs):
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(r"`\1`", obj.docstring.value)
