"""Give pydantic the name `torch` when speculators rebuilds its config schemas (transformers 5).

transformers 5.x annotates PretrainedConfig's fields with `torch.dtype` and imports torch only
for type checkers. speculators' config models subclass PretrainedConfig, so
`cls.model_rebuild(force=True)` in `ReloadableBaseModel.reload_schema` (run by
`import speculators`) evaluates those annotations and raises
`PydanticUndefinedAnnotation: name 'torch' is not defined`: the package does not import.
speculators 0.9.0 fixed it the same way: `_types_namespace={"torch": torch}`.

Acts on `cls.model_rebuild(...)` calls with no `_types_namespace` and no splat; imports torch in
the function, so the module's own imports stay as they were.
"""

from __future__ import annotations

import libcst as cst

from vllm_shim_patch.rewrite.scoped import ScopedTransform, dotted

COMMENT = ("# transformers 5 annotates PretrainedConfig with torch.dtype but imports torch",
           "# only for type checkers: pydantic needs the name to rebuild the schema.")


class Codemod(ScopedTransform):
    region_only = True  # acts on its region's own node

    def leave_FunctionDef(self, original_node: cst.FunctionDef,
                          updated_node: cst.FunctionDef) -> cst.FunctionDef:
        if not self.at_scope or not isinstance(updated_node.body, cst.IndentedBlock):
            return updated_node
        body = list(updated_node.body.body)
        for index, stmt in enumerate(body):
            call = _rebuild_call(stmt)
            if call is None:
                continue
            if any(a.keyword is not None and a.keyword.value == "_types_namespace" for a in call.args):
                return updated_node
            if any(a.star for a in call.args):
                self.needs_human(original_node, "a ** or * argument may pass _types_namespace already: "
                                                'add _types_namespace={"torch": torch} by hand')
                return updated_node
            args = list(call.args)
            if args and args[-1].comma is cst.MaybeSentinel.DEFAULT:
                args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            args.append(cst.Arg(keyword=cst.Name("_types_namespace"),
                                value=cst.parse_expression('{"torch": torch}'),
                                equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                                      whitespace_after=cst.SimpleWhitespace(""))))
            assert isinstance(stmt, cst.SimpleStatementLine)
            expr = stmt.body[0]
            assert isinstance(expr, cst.Expr)
            new_stmt = stmt.with_changes(body=[expr.with_changes(value=call.with_changes(args=args))],
                                         leading_lines=[])
            import_torch = cst.parse_statement("import torch\n").with_changes(
                leading_lines=[*stmt.leading_lines, *(cst.EmptyLine(comment=cst.Comment(c)) for c in COMMENT)])
            body[index:index + 1] = [import_torch, new_stmt]
            self.edited(original_node, 'rebuild with _types_namespace={"torch": torch} (transformers 5)')
            return updated_node.with_changes(body=updated_node.body.with_changes(body=body))
        return updated_node


def _rebuild_call(stmt: cst.BaseStatement) -> cst.Call | None:
    """The `cls.model_rebuild(...)` call a statement consists of, else None."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None
    expr = stmt.body[0]
    if not isinstance(expr, cst.Expr) or not isinstance(expr.value, cst.Call):
        return None
    return expr.value if dotted(expr.value.func) == "cls.model_rebuild" else None
