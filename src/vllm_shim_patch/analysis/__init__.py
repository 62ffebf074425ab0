"""Reading the package's calls into vLLM: scanning, binding, verification in the target, the audit."""
