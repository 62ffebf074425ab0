"""Keep speculators working against newer vLLM releases: declarative, verified, reversible."""

__version__ = "0.1.0"
__all__ = ["__version__"]
