"""Return generate()'s results in input order (speculators 0.4.0 and 0.4.0.1).

speculators 0.4.0 builds its results with `for req_id in sorted(request_id_to_idx.keys())`: a
string sort of "req_N_i", so with 11 or more prompts "req_N_10" comes before "req_N_2" and
results[j] is not prompt j's. Its own offline script pairs `batch_loss_mask[j]` with
`results[j]`, so loss masks land on the wrong samples from --batch-size 11 on. The dict of
request ids is filled in input order, and a dict keeps it: iterate the dict itself.
"""

from __future__ import annotations

import libcst as cst

from vllm_shim_patch.rewrite.scoped import ScopedTransform, dotted


def _sorted_keys(node: cst.BaseExpression) -> str | None:
    """`sorted(D.keys())` or `sorted(D)`: D, else None."""
    if not (isinstance(node, cst.Call) and dotted(node.func) == "sorted" and len(node.args) == 1
            and node.args[0].keyword is None and node.args[0].star == ""):
        return None
    arg = node.args[0].value
    if isinstance(arg, cst.Call) and isinstance(arg.func, cst.Attribute) and arg.func.attr.value == "keys" \
            and not arg.args and isinstance(arg.func.value, cst.Name):
        return arg.func.value.value
    return arg.value if isinstance(arg, cst.Name) else None


class Codemod(ScopedTransform):
    region_only = True  # acts on its region's own node; the rest through self.module

    def __init__(self, *args: object, **kwargs: object):
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.dicts: set[str] = set()

    def visit_Assign(self, node: cst.Assign) -> None:
        # Only a dict the function fills itself: its insertion order is the order it was filled.
        if self.in_scope and isinstance(node.value, cst.Dict) and not node.value.elements:
            self.dicts |= {t.target.value for t in node.targets if isinstance(t.target, cst.Name)}

    def leave_For(self, original_node: cst.For, updated_node: cst.For) -> cst.For:
        name = _sorted_keys(updated_node.iter) if self.in_scope else None
        if name is None or name not in self.dicts:
            return updated_node
        self.edited(original_node, f"iterate {name} in insertion (input) order, not sorted as strings")
        return updated_node.with_changes(iter=cst.Name(name))
