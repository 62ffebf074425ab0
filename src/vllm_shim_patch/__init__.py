"""Keep speculators working against newer vLLM releases: declarative, verified, reversible.

The Python API is the CLI's: build a `Settings`, wrap it in a `Context`, call a command from
`vllm_shim_patch.commands` (each returns an `Outcome`: text, JSON data, exit code). Nothing is
imported here, so `import vllm_shim_patch` stays free.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
