"""Dropping the imports a codemod no longer needs: the shortcut writes what the whole-module pass writes.

`scoped.remove_imports` runs libcst's RemoveImportsVisitor over the statements that hold the
imports alone where the module's tokens show nothing can use them; everywhere else over the whole
module. Each case is run both ways and must give the same bytes.
"""

from __future__ import annotations

import libcst as cst
import pytest

from vllm_shim_patch.rewrite.scoped import ImportDrop, _provably_unused, remove_imports


def _drop(module: str, obj: str | None = None) -> ImportDrop:
    return ImportDrop(module, obj, "drop", None)


CASES = [
    pytest.param("import logging\nimport types\n\nx = 1\n", [_drop("types")], True,
                 "import logging\n\nx = 1\n", id="plain-import"),
    pytest.param("import os, types  # both\n", [_drop("types")], True, "import os  # both\n", id="one-of-two"),
    pytest.param("import os; import types\nx = os.sep\n", [_drop("types")], True, "import os; \nx = os.sep\n",
                 id="semicolons"),  # libcst's own way with the line
    pytest.param("from m import (\n    a,  # the a\n    b,\n)\nb()\n", [_drop("m", "a")], True,
                 "from m import (\n    b,\n)\nb()\n", id="parenthesised-from"),
    pytest.param("from m import a\nfrom n import a as c\nc()\n", [_drop("m", "a")], False,
                 "from n import a as c\nc()\n", id="the-name-twice-full-pass"),
    pytest.param("import types\ntypes.MethodType\n", [_drop("types")], False, "import types\ntypes.MethodType\n",
                 id="still-used"),
    pytest.param("import types\ndef f(types):\n    return types\n", [_drop("types")], False,
                 "def f(types):\n    return types\n", id="shadowed-full-pass-removes"),
    pytest.param("import types\n__all__ = ['types']\n", [_drop("types")], False,
                 "import types\n__all__ = ['types']\n", id="exported"),
    pytest.param("import types\ndef f(x: 'types.X'): pass\n", [_drop("types")], False,
                 "import types\ndef f(x: 'types.X'): pass\n", id="string-annotation"),
    pytest.param('"""The types module."""\nimport types\n\n\ndef f():\n    """Bound with types.MethodType."""\n'
                 '    "a" "types"\n', [_drop("types")], True,
                 '"""The types module."""\n\n\ndef f():\n    """Bound with types.MethodType."""\n    "a" "types"\n',
                 id="docstrings-name-it"),
    pytest.param('import types\nx = ("types"\n     "")\n', [_drop("types")], False,
                 'x = ("types"\n     "")\n', id="a-string-in-an-expression-full-pass"),
    pytest.param('from typing import cast\nimport types\ncast("types.X", y)\n', [_drop("types")], False,
                 'from typing import cast\nimport types\ncast("types.X", y)\n', id="a-string-in-a-typing-call"),
    pytest.param("import types  # types are gone\nx = 1\n", [_drop("types")], True, "x = 1\n",
                 id="a-comment-names-it"),
    pytest.param("def f():\n    import types\n    return 1\n", [_drop("types")], False,
                 "def f():\n    return 1\n", id="not-at-module-level"),
    pytest.param("import a.b\nimport c\n", [_drop("a.b"), _drop("c")], True, "\n", id="dotted-and-another"),
    pytest.param("from __future__ import annotations\n", [_drop("__future__", "annotations")], False,
                 "from __future__ import annotations\n", id="future"),
    pytest.param("import types\nx = f'{types}'\n", [_drop("types")], False, "import types\nx = f'{types}'\n",
                 id="f-string"),
    pytest.param("# header\n\nimport types\r\nx = 1\r\n", [_drop("types")], True, "# header\n\nx = 1\r\n",
                 id="crlf-and-header"),
    pytest.param("x = 0\n\n# about types\nimport types\n\ny = 1\n", [_drop("types")], True,
                 "x = 0\n\ny = 1\n", id="the-lines-above-go-with-it"),
    pytest.param("import os\nfrom m import a  # a\nos.sep\n", [_drop("m", "a")], True,
                 "import os\nos.sep\n", id="from-one-name"),
    pytest.param("from m import (a,)\n", [_drop("m", "a")], True, "\n", id="from-one-name-trailing-comma"),
    pytest.param("from .m import a\n", [_drop("m", "a")], True, "from .m import a\n", id="relative-kept"),
    pytest.param("from m import a as b\n", [_drop("m", "a")], True, "from m import a as b\n",
                 id="renamed-kept"),
    pytest.param("import a.b as c\n", [_drop("a.b")], False, "import a.b as c\n", id="module-renamed-kept"),
    pytest.param("import types\nfrom m import a, b\nb()\n", [_drop("types"), _drop("m", "a")], True,
                 "from m import b\nb()\n", id="one-whole-one-of-two"),
]


@pytest.mark.parametrize(("source", "drops", "shortcut", "after"), CASES)
def test_the_shortcut_writes_what_the_whole_module_pass_writes(source: str, drops: list[ImportDrop],
                                                               shortcut: bool, after: str) -> None:
    module = cst.parse_module(source)
    assert (_provably_unused(module, drops) is not None) is shortcut
    fast = remove_imports(module, drops).code
    assert fast == remove_imports(module, drops, shortcut=False).code
    assert fast == after
