"""The rehearsal, seen from the tool: what to ask the target, and what its answer means.

The run itself is the `_remote/rehearse/` package inside the target interpreter (through the target
session); here: which speculators versions it knows, the request, the verdict, and which loaded
rule matches the site where it failed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..errors import TargetError, UsageError
from ..kinds import Action
from ..target import load_remote_package
from ..vllm_source import parse_scope
from .handoff import CANNOT, FAILED, PASSED, Answer, Request, Topology
from .workloads import PARITY, QUICK

if TYPE_CHECKING:
    from ..rewrite.rule import Rule
    from ..rewrite.results import Site
    from ..rewrite.plan import Plan
    from ..settings import Log
    from ..target import Target

# The releases whose VllmHiddenStatesGenerator(model_path, layer_ids, max_model_len,
# gpu_memory_utilization) and generate(prompts) the rehearsal drives.
SUPPORTED = ("0.3.0", "0.4.0", "0.4.0.1")
# Seconds the rehearsal may take (`--timeout`). The parity workload takes 21 s on vLLM 0.16.0 on
# this 2-core machine when idle (47 s before the stand-in attention ran in blocks), and up to 153 s
# in docs/compatibility.md (vLLM 0.12.0, shared, measured before that change);
# under load 300 s ran out two thirds of the way through: six times the slowest cell.
TIMEOUT = 900.0


# How far below a scoped rule's edit a failure in the same function is still that edit's site.
NEAR_LINES = 8


def refusal(target: Target) -> tuple[str, str] | None:
    """Why the rehearsal cannot run on this target, short and in full (None: it can)."""
    if target.package != "speculators":
        return (f"{target.package} is not speculators",
                f"the rehearsal drives speculators' generator; {target.package} is not speculators")
    if released(target.version) not in SUPPORTED:
        return (f"speculators {target.version} is not supported",
                f"the rehearsal supports speculators {', '.join(SUPPORTED)}; "
                f"{target.package} {target.version} is installed (verify still binds its calls)")
    if target.vllm_location is None:
        return ("no vLLM in the target",
                f"vLLM is not installed in {target.python}: give --python the interpreter of the "
                f"environment that has vLLM")
    return None


def check_can_run(target: Target) -> None:
    why = refusal(target)
    if why is not None:
        raise TargetError(f"cannot rehearse: {why[1]}")


def families() -> Any:
    """The rehearsal's one family table (`_remote/rehearse/families/`: FAMILIES, `presets()`,
    `supported()`), loaded by path under a private name: its modules are standard library only at
    module level, so nothing of the rehearsal or of vLLM runs in the tool."""
    return load_remote_package(_FAMILIES_MODULE, "rehearse", "families")


_FAMILIES_MODULE = "_vsp_rehearse_families"


def presets() -> list[str]:
    """The `--arch` names: each family's, and its further presets."""
    return list(families().presets())


def supported_architectures() -> list[str]:
    """The architectures the rehearsal has stand-ins for (`--model`)."""
    return list(families().supported())


def model_request(model: str | None, arch: str | None, log: Log | None = None) -> dict[str, Any]:
    """What the rehearsal builds, checked before anything is written: `--model` (a checkpoint
    folder or its config.json, whose architecture must be one the rehearsal has stand-ins for),
    `--arch` (a preset), or neither (the default, a tiny Llama). The config is read bounded and its
    sizes checked here (`modelconfig`): the target would build from them. `log`: where to say that
    the folder's own code (`auto_map`) will run."""
    if model and arch:
        raise UsageError("--model and --arch: give one (--arch builds a preset where no checkpoint is at hand)")
    if arch:
        if arch not in presets():
            raise UsageError(f"--arch {arch}: no such preset (known: {', '.join(presets())})")
        return {"arch": arch}
    if not model:
        return {}
    from .modelconfig import check_sizes, read_config, remote_code, remote_code_line

    path, config, data = read_config(model)
    archs = data.get("architectures") if isinstance(data, dict) else None
    if not isinstance(archs, list) or not archs:
        raise UsageError(f"--model {model}: {config} names no architectures")
    table = families()
    family = next((table.for_architecture(a) for a in archs if isinstance(a, str) and table.for_architecture(a)),
                  None)
    if family is None:
        raise UsageError(f"--model {model}: the rehearsal has no stand-ins for {', '.join(map(str, archs))} "
                         f"(supported: {', '.join(supported_architectures())})")
    check_sizes(model, config, data, wrapper=bool(family.WRAPPER))
    code = remote_code(data)
    if code and log is not None:
        log(remote_code_line(model, config, code))
    return {"model": str(path)}


def released(version: str) -> str:
    """The release a version is: itself, or the release a patched wheel of this tool was built
    from (0.3.0+vsp.vllm0.16 is 0.3.0, whose generator the rehearsal knows)."""
    from ..fleet.naming import parse_local

    found = parse_local(version)
    return found[0] if found else version


def request(*, verbose: bool = False, timeout: float = TIMEOUT, quick: bool = False,
            model: dict[str, Any] | None = None, installed: str | None = None,
            topology: Topology | None = None) -> Request:
    """`model`: `model_request`'s answer. `installed`: the target's speculators version, named
    supported too when it is a patched wheel's build of a supported release (the target compares
    the version string)."""
    supported = list(SUPPORTED)
    if installed is not None and installed not in supported and released(installed) in SUPPORTED:
        supported.append(installed)
    model = model or {}
    return Request(QUICK if quick else PARITY, timeout, verbose, tuple(supported), model.get("model"),
                   model.get("arch"), topology or Topology())


def topology(tensor_parallel: int | None, pipeline_parallel: int | None, model: dict[str, Any],
             target: Target) -> Topology:
    """The topology to rehearse on `target` (`topology.choose`): refused (UsageError) where it
    cannot run, before anything is written."""
    from .topology import choose

    return choose(tensor_parallel, pipeline_parallel, model, target.location, target.version)


@dataclass(frozen=True)
class Rehearsal:
    """The target's answer, with the loaded rules' sites that match where it failed."""

    answer: Answer
    fixes: tuple[Site, ...] = ()
    pending: tuple[str, ...] = ()  # rules that would still edit the package as it is now
    opt_ins: tuple[tuple[str, str], ...] = ()  # (rule, option): opt-in rules whose symptoms match

    @property
    def outcome(self) -> str:
        return self.answer.outcome

    @property
    def passed(self) -> bool:
        return self.outcome == PASSED

    @property
    def failed(self) -> bool:
        """A failure found in speculators' run. Running out of time is none (outcome TIMEOUT:
        the run could not finish, as CANNOT could not start)."""
        return self.outcome == FAILED

    @property
    def failure(self) -> dict[str, Any]:
        return self.answer.failure or {}

    def as_dict(self) -> dict[str, Any]:
        return {**self.answer.to_json(),
                "fixes": [{"rule": s.rule_id, "path": s.path, "line": s.line, "action": str(s.action)}
                          for s in self.fixes],
                "pending_rules": list(self.pending),
                "opt_in_fixes": [{"rule": r, "option": o} for r, o in self.opt_ins]}


def interpret(answer: Answer, plan: Plan | None, declined: frozenset[str] = frozenset(),
              skipped: frozenset[str] = frozenset(), rules: Sequence[Rule] = (),
              options: frozenset[str] = frozenset()) -> Rehearsal:
    """Attach the rule that matches the failing site, from `plan` (the rules on the files as they
    are now): pending sites that span the speculators frame's line, else a pending scoped edit in
    the same function at most NEAR_LINES above it. `declined`: rules the reviewer said no to in this
    run; `skipped`: rules --skip/--only left out (`plan` then holds them, so they can be named)."""
    if plan is None or answer.outcome not in (FAILED, CANNOT):
        return Rehearsal(answer)
    pending = [s for s in plan.sites if s.action in (Action.EDITED, Action.NEEDS_HUMAN, Action.DECLINED)]
    if answer.outcome == CANNOT:
        # A stand-in that cannot follow where vLLM went is no site of speculators' to fix; but a
        # rule may be what keeps vLLM on the path it can follow (the V1 runner): named by symptom.
        named, wanted = _by_symptom(answer, rules, pending, options)
        return Rehearsal(answer, tuple(_marked(named, declined, skipped)), (), tuple(wanted))
    if answer.wrong:
        # Wrong data has no failing line: the fixes are the pending edits inside the code that
        # produced it (generate() and the worker's capture methods), one per rule.
        spans = answer.data_frames or ()
        inside = [s for s in pending if any(s.path == f.file and f.line <= s.line <= f.end_line for f in spans)]
        fixes = _marked(list({s.rule_id: s for s in reversed(inside)}.values())[::-1], declined, skipped)
        return Rehearsal(answer, tuple(fixes), tuple(dict.fromkeys(s.rule_id for s in pending)))
    frame = (answer.failure or {}).get("speculators_frame") or {}
    line = int(frame.get("line") or 0)
    here = [s for s in pending if s.path == frame.get("file")]
    fixes = [s for s in here if s.line <= line <= s.end_line]
    if not fixes and frame.get("function"):
        # Code another rule's edit leaves unbound (it never runs once that rule applies): that rule.
        dead = {s.by for s in plan.sites if s.by and s.path == frame.get("file")
                and parse_scope(s.callee)[1][:1] == (frame["function"],)}
        fixes = [next(p for p in pending if p.rule_id == rule) for rule in sorted(dead)
                 if any(p.rule_id == rule for p in pending)][:1]
    if not fixes and frame.get("function"):
        # A scoped edit just above the failing line (its result used there, e.g. the reply of
        # collective_rpc tested a few lines later); farther away it is a guess, so none is named.
        near = [s for s in here if ":" in s.callee and s.end_line <= line <= s.end_line + NEAR_LINES
                and parse_scope(s.callee)[1][-1:] == (frame["function"],)]
        fixes = sorted(near, key=lambda s: line - s.end_line)[:1]
    opt_ins: list[tuple[str, str]] = []
    if not fixes:
        # No rule's edit is on the failing line: the rules whose symptoms match the exception (a
        # keyword a replaced function does not take fails at the caller's line, not the rule's).
        fixes, opt_ins = _by_symptom(answer, rules, pending, options)
    fixes = _marked(fixes, declined, skipped)
    return Rehearsal(answer, tuple(fixes), tuple(dict.fromkeys(s.rule_id for s in pending)), tuple(opt_ins))


def _by_symptom(answer: Answer, rules: Sequence[Rule], pending: list[Site],
                options: frozenset[str]) -> tuple[list[Site], list[tuple[str, str]]]:
    """The pending sites of the rules whose `symptoms` match the failure's exception, and the
    opt-in rules (with their option) that would fix it but were not asked for."""
    text = str((answer.failure or {}).get("exception") or "")
    fixes: list[Site] = []
    opt_ins: list[tuple[str, str]] = []
    for rule in rules:
        if not any(re.search(p, text) for p in rule.symptoms):
            continue
        sites = [s for s in pending if s.rule_id == rule.id]
        if sites:
            fixes.append(sites[0])
        elif rule.option is not None and rule.option not in options:
            opt_ins.append((rule.id, rule.option))
    return fixes, opt_ins


def _marked(fixes: list[Site], declined: frozenset[str], skipped: frozenset[str]) -> list[Site]:
    """A fix the reviewer declined, or --skip/--only left out, says so."""
    return [replace(s, action=Action.SKIPPED) if s.rule_id in skipped
            else replace(s, action=Action.DECLINED) if s.rule_id in declined else s for s in fixes]
