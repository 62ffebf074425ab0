"""The rewrite layer: the libcst engine, the call-site context, the operations, the plan."""
