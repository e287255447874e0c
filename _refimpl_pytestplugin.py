"""pytest plugin entry point for refimpl (registered under ``pytest11``).

Kept as a top-level module, like Hypothesis's ``_hypothesis_pytestplugin``, so that loading the plugin
imports nothing from refimpl (nor numpy/scipy) unless the user asks for a conformance run.
"""
