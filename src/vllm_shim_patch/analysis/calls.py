"""Find the calls a module makes into vLLM, by qualified name, with the shape binding needs."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider, QualifiedNameProvider


@dataclass(frozen=True)
class CallRecord:
    path: str
    line: int
    callee: str
    n_positional: int
    keywords: tuple[str, ...]
    star_args: bool
    star_kwargs: bool
    code: str  # the call's own source text
    end_line: int = 0  # the call's last line (0: unknown), to find the calls inside a site's lines

    def bind(self, signature: object) -> object:
        return signature.bind(  # type: ignore[attr-defined]
            self.n_positional, self.keywords, star_args=self.star_args, star_kwargs=self.star_kwargs
        )


class _Collector(cst.CSTVisitor):
    METADATA_DEPENDENCIES = (QualifiedNameProvider, PositionProvider)

    def __init__(self, path: str, prefixes: tuple[str, ...]):
        self.path = path
        self.prefixes = prefixes
        self.found: list[CallRecord] = []
        self._module = cst.Module(body=[])

    def visit_Call(self, node: cst.Call) -> None:
        names = sorted(q.name for q in self.get_metadata(QualifiedNameProvider, node.func, set()))
        names = [n for n in names if n.startswith(self.prefixes)]
        if not names:
            return
        span = self.get_metadata(PositionProvider, node)
        self.found.append(
            CallRecord(
                path=self.path,
                line=span.start.line,
                callee=names[0],
                n_positional=sum(1 for a in node.args if a.keyword is None and not a.star),
                keywords=tuple(a.keyword.value for a in node.args if a.keyword is not None),
                star_args=any(a.star == "*" for a in node.args),
                star_kwargs=any(a.star == "**" for a in node.args),
                code=self._module.code_for_node(node),
                end_line=span.end.line,
            )
        )


def scan(source: bytes, path: str, prefixes: Iterable[str] = ("vllm.",)) -> list[CallRecord]:
    """Every call in `source` whose callee resolves through imports to a name under `prefixes`."""
    prefix = tuple(prefixes)
    if not any(p.split(".")[0].encode() in source for p in prefix):
        return []
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError:
        return []
    collector = _Collector(path, prefix)
    MetadataWrapper(module).visit(collector)
    return collector.found

