"""The audit's text: what is shown for fixed, remaining, unknown and added uses, with and without
the rules."""

from __future__ import annotations

from vllm_shim_patch.analysis.audit import AuditRow
from vllm_shim_patch.analysis.calls import CallRecord
from vllm_shim_patch.analysis.verify import Binding
from vllm_shim_patch.report.audit import render
from vllm_shim_patch.kinds import BindStatus

OK, MISMATCH, UNKNOWN = BindStatus.OK, BindStatus.MISMATCH, BindStatus.UNKNOWN


def use(line: int, kind: str, callee: str) -> CallRecord:
    return CallRecord("pkg/m.py", line, callee, 0, (), False, False, "x", kind=kind, on_instance=kind != "call")


ROWS = [
    AuditRow(Binding(use(1, "import", "vllm.a.B"), OK, ""), None, (), ""),
    AuditRow(Binding(use(2, "call", "vllm.a.B"), MISMATCH, "missing required argument 'x'"),
             Binding(use(2, "call", "vllm.a.B"), OK, ""), ("b-add-x",), ""),
    AuditRow(Binding(use(3, "method", "vllm.a.B.go"), MISMATCH, "instance of vllm.a.B has no attribute 'go'"),
             None, (), ""),
    AuditRow(Binding(use(4, "attribute", "vllm.a.B.f"), UNKNOWN, "why not"), None, (), ""),
    AuditRow(Binding(use(9, "method", "vllm.a.B.run"), MISMATCH, "too many positional arguments (1 given, 0 accepted)"),
             Binding(use(9, "method", "vllm.a.B.run"), MISMATCH, "too many positional arguments (1 given, 0 accepted)"),
             (), "", added=True),
]


def test_text_with_the_rules() -> None:
    text, data = render(ROWS, "pkg 1.0", "vLLM 0.16.0", verbose=False)
    assert text.splitlines() == [
        "pkg 1.0 against vLLM 0.16.0: 4 uses of vLLM (1 call, 1 method call, 1 import, 1 attribute read), "
        "and 1 the rules add",
        "  pkg/m.py:2: vllm.a.B: mismatch (missing required argument 'x') -> fixed by b-add-x",
        "  pkg/m.py:3: method vllm.a.B.go: mismatch (instance of vllm.a.B has no attribute 'go') -> no rule fixes this",
        "  pkg/m.py:4: attribute vllm.a.B.f: unknown (why not)",
        "  pkg/m.py:9: method vllm.a.B.run: mismatch (too many positional arguments (1 given, 0 accepted)) "
        "(added by the rules; line of the patched file) -> the rules write this; fix the rule",
        "5 uses: 1 ok, 1 fixed by the rules, 2 still mismatched, 1 unknown",
    ]
    assert data["summary"] == {"uses": 5, "added": 1, "ok": 1, "fixed": 1, "remaining": 2, "unknown": 1,
                               "call": 1, "method": 1, "import": 1, "attribute": 1}


def test_text_without_the_rules() -> None:
    text, _ = render(ROWS[:1] + ROWS[2:4], "pkg 1.0", "vLLM 0.16.0, rules not applied", verbose=True, rules=False)
    assert text.splitlines() == [
        "pkg 1.0 against vLLM 0.16.0, rules not applied: 3 uses of vLLM (1 method call, 1 import, 1 attribute read)",
        "  pkg/m.py:1: import vllm.a.B: ok",
        "  pkg/m.py:3: method vllm.a.B.go: mismatch (instance of vllm.a.B has no attribute 'go')",
        "  pkg/m.py:4: attribute vllm.a.B.f: unknown (why not)",
        "3 uses: 1 ok, 1 mismatched, 1 unknown",
    ]


def test_uses_the_rules_take_out_are_neither_remaining_nor_unknown() -> None:
    gone = [
        AuditRow(Binding(use(15, "import", "vllm.a.old.C"), MISMATCH, "no module vllm.a.old"), None,
                 ("c-move",), "", removed=True),
        AuditRow(Binding(use(16, "import", "vllm.a.D"), UNKNOWN, "cannot tell"), None, (), "", removed=True),
        AuditRow(Binding(use(17, "import", "vllm.a.E"), OK, ""), None, (), "", removed=True),
    ]
    text, data = render(gone, "pkg 1.0", "vLLM 0.16.0", verbose=False)
    assert text.splitlines() == [
        "pkg 1.0 against vLLM 0.16.0: 3 uses of vLLM (3 imports)",
        "  pkg/m.py:15: import vllm.a.old.C: mismatch (no module vllm.a.old) -> taken out by c-move",
        "3 uses: 2 ok, 1 fixed by the rules, 0 still mismatched, 0 unknown",
    ]
    assert [(u["line"], u["fixed"], u["remaining"], u["removed"]) for u in data["uses"]] == [
        (15, True, False, True), (16, False, False, True), (17, False, False, True)]
    verbose, _ = render(gone[1:2], "pkg 1.0", "vLLM 0.16.0", verbose=True)
    assert verbose.splitlines()[1] == "  pkg/m.py:16: import vllm.a.D: unknown (cannot tell) -> taken out by the rules"


def test_the_imports_of_other_packages_have_their_section_and_count() -> None:
    from vllm_shim_patch.analysis.packages import PackageAudit

    gone = "not installed in the target; pkg requires torch"
    rows = [
        AuditRow(Binding(use(5, "import", "torch.nn"), UNKNOWN, gone), None, (), ""),
        AuditRow(Binding(use(6, "import", "torch"), UNKNOWN, gone), None, (), ""),
        AuditRow(Binding(use(7, "import", "transformers.old.f"), MISMATCH, "no module transformers.old"),
                 Binding(use(7, "import", "transformers.new.f"), OK, ""), ("f-move",), ""),
        AuditRow(Binding(use(8, "import", "transformers.g"), OK, ""), None, (), ""),
    ]
    packages = PackageAudit(rows, {"transformers": ["transformers 5.24.0"]}, {"torch": gone})
    text, data = render(ROWS[:1], "pkg 1.0", "vLLM 0.16.0", verbose=False, packages=packages)
    assert text.splitlines() == [
        "pkg 1.0 against vLLM 0.16.0: 1 use of vLLM (1 import)",
        "4 imports of other packages, checked in the target (transformers 5.24.0; not installed: torch)",
        # A package that is not there is one finding, however many imports of it there are.
        f"  pkg/m.py:5: import torch.nn: unknown ({gone}) (and 1 more import of torch)",
        "  pkg/m.py:7: import transformers.old.f: mismatch (no module transformers.old) -> fixed by f-move",
        "1 use: 1 ok, 0 fixed by the rules, 0 still mismatched, 0 unknown; "
        "4 imports of other packages: 1 ok, 1 fixed by the rules, 0 still mismatched, 2 unknown",
    ]
    assert data["summary"]["uses"] == 1  # the vLLM summary counts vLLM's uses alone
    assert data["packages"]["summary"] == {"uses": 4, "added": 0, "ok": 1, "fixed": 1, "remaining": 0, "unknown": 2}
    as_installed = PackageAudit([*rows[:2], rows[3]], packages.distributions, packages.not_installed)
    verbose, _ = render([], "pkg 1.0", "vLLM 0.16.0", verbose=True, rules=False, packages=as_installed)
    assert verbose.splitlines()[2:] == [f"  pkg/m.py:5: import torch.nn: unknown ({gone})",
                                        f"  pkg/m.py:6: import torch: unknown ({gone})",
                                        "  pkg/m.py:8: import transformers.g: ok",
                                        "0 uses: 0 ok, 0 mismatched, 0 unknown; "
                                        "3 imports of other packages: 1 ok, 0 mismatched, 2 unknown"]
