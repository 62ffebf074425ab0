"""Where an exception was raised and which frames of speculators and vLLM it passed through.

Pure: the package roots are arguments (the run passes the installed ones), so this is tested
without vLLM. `classify` decides the outcome from where the exception was raised: walking out
from the innermost frame, the first frame of speculators or of a stand-in (a file of this
package) decides. vLLM frames on the way are passed over, so vLLM code a stand-in called is the
stand-in's; but a stand-in that hands a call on to the real member it stands in for (the runner's
`execute_model` calling `GPUModelRunner.execute_model` to let vLLM judge the protocol) is passed
over too: there vLLM judges speculators' call. A TypeError raised where vLLM calls a stand-in with
arguments it does not take (the frame raising is the caller's; the message names the callee) is
the stand-in's as well.
"""

from typing import Any

import gc
import os
import re
import traceback
import types

from .answer import CANNOT, FAILED, ContractBroken, RankFailed, WrongOutput

# Every file of this package is a stand-in or the rehearsal's own plumbing.
OWN_ROOT = os.path.dirname(os.path.abspath(__file__))
# Files the rehearsal wrote as stand-ins for a checkpoint's own (a model's remote code), by the
# folder they run from (the run's temp folder: transformers copies them into its module cache
# there) and their names: a --model folder's own files of the same name are the user's.
WRITTEN: list[tuple[str, frozenset[str]]] = []


def mark_written(root, names):
    WRITTEN.append((os.path.abspath(root), frozenset(names)))


def _written(path):
    return any(_inside(path, root) and os.path.basename(path) in names for root, names in WRITTEN)


def _inside(path, root):
    return bool(root) and os.path.abspath(path).startswith(root + os.sep)


def frame(fs, root, base=None):
    """One frame as the report shows it: the file relative to the package's parent (or `base`)."""
    rel_base = os.path.dirname(root) if root else None
    fn = os.path.abspath(fs.filename)
    if not (rel_base and fn.startswith(rel_base + os.sep)):
        rel_base = base  # relative to vLLM's site-packages when outside the package
    rel = os.path.relpath(fn, rel_base) if rel_base and fn.startswith(rel_base + os.sep) else fn
    return {"file": rel, "line": fs.lineno, "code": (fs.line or "").strip(), "function": fs.name}


def last_frame_in(frames, root, base=None):
    if not root:
        return None
    for fs in reversed(frames):
        if _inside(fs.filename, root):
            return frame(fs, root, base)
    return None


def raised_in(path, speculators, vllm, own=OWN_ROOT):
    if _inside(path, speculators):
        return "speculators"
    if _inside(path, vllm):
        return "vllm"
    if _inside(path, own) or _written(path):
        return "rehearse-stand-in"
    return "other"


def message(exc, limit=500):
    msg = " | ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    return msg if len(msg) <= limit else msg[:limit - 3] + "..."


def describe(exc, speculators, vllm, own=OWN_ROOT):
    """The exception, the last speculators and vLLM frames it passed, and where it was raised."""
    frames = traceback.extract_tb(exc.__traceback__)
    base = os.path.dirname(vllm) if vllm else None
    raised = frames[-1] if frames else None
    where = raised_in(raised.filename, speculators, vllm, own) if raised is not None else "other"
    return {
        "exception": f"{type(exc).__name__}: {message(exc)}",
        "speculators_frame": last_frame_in(frames, speculators, base),
        "vllm_frame": last_frame_in(frames, vllm, base),
        "raised_frame": frame(raised, vllm if where == "vllm" else speculators, base) if raised else None,
        "raised_in": where,
    }


# A call that does not fit the callee's signature: CPython names the callee by its qualified name.
_SIGNATURE = re.compile(r"^([\w.<>]+)\(\) (?:got an unexpected keyword argument|got multiple values|"
                        r"got some positional-only|takes |missing \d+ required)")


def _receiver(frame):
    """id() of the frame's first argument (a method's `self`), or None."""
    code = frame.f_code
    if not code.co_argcount:
        return None
    first = frame.f_locals.get(code.co_varnames[0], _receiver)
    return None if first is _receiver else id(first)


def _entries(exc):
    """(file, line, qualified function name, id of its `self`) of each frame, outermost first."""
    out, tb = [], exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        out.append((os.path.abspath(code.co_filename), tb.tb_lineno, getattr(code, "co_qualname", code.co_name),
                    _receiver(tb.tb_frame)))
        tb = tb.tb_next
    return out


def _member(qualname):
    """A stand-in's name as its module spells it: the class and method, without the builder's locals."""
    return qualname.rsplit("<locals>.", 1)[-1]


def functions_under(root):
    """{qualified name: (file, first line)} of every live function defined in a file under `root`
    (stand-ins are often classes built inside a function, so they are not module attributes;
    speculators' patched forward lives on a vLLM object)."""
    found: dict[str, Any] = {}
    if not root:
        return found
    for obj in gc.get_objects():
        if isinstance(obj, types.FunctionType) and _inside(obj.__code__.co_filename, root):
            found.setdefault(obj.__qualname__, (os.path.abspath(obj.__code__.co_filename),
                                                obj.__code__.co_firstlineno))
    return found


def _callee_standin(exc, own, standins):
    """(file, line, qualname) of the stand-in a TypeError says was called with arguments it does
    not take, or None."""
    if not isinstance(exc, TypeError):
        return None
    m = _SIGNATURE.match(str(exc))
    if not m:
        return None
    table = functions_under(own) if standins is None else standins
    name = m.group(1)
    if name in table:
        return (*table[name], name, None)
    if "." not in name:
        # Before Python 3.10 the message names the function alone: only an unambiguous name counts.
        same = [q for q in table if q.rsplit(".", 1)[-1] == name]
        if len(same) == 1:
            return (*table[same[0]], same[0], None)
    return None


def _callee_speculators(exc, speculators, functions):
    """(file, line, qualname, None) of speculators' function a TypeError says was called with
    arguments it does not take: vLLM calling speculators' replacement of one of its methods (the
    model's forward passing a keyword speculators' forward lacks) fails before that function has a
    frame, so only the message names it."""
    if not isinstance(exc, TypeError):
        return None
    m = _SIGNATURE.match(str(exc))
    if not m:
        return None
    table = functions_under(speculators) if functions is None else functions
    name = m.group(1)
    if name in table:
        return (*table[name], name, None)
    return None


def deciding_frame(exc, speculators, vllm, own=OWN_ROOT, standins=None, speculators_fns=None):
    """("speculators" | "stand-in", (file, line, qualname, receiver id)) for the frame that
    decides the outcome, or None when neither code is on the stack."""
    entries = _entries(exc)
    innermost = entries[-1] if entries else None
    if innermost is None or raised_in(innermost[0], speculators, vllm, own) != "speculators":
        # vLLM (or a stand-in) called a stand-in with arguments it does not take.
        callee = _callee_standin(exc, own, standins)
        if callee is not None:
            return "stand-in", callee
        # ... or called speculators' own function so.
        callee = _callee_speculators(exc, speculators, speculators_fns)
        if callee is not None:
            return "speculators", callee
    callee = None  # the vLLM or stand-in frame the current one called (None for the innermost)
    for entry in reversed(entries):
        where = raised_in(entry[0], speculators, vllm, own)
        if where == "speculators":
            return "speculators", entry
        if where == "rehearse-stand-in":
            # Handed on: the vLLM member of the same name, called on the same object (the
            # stand-in's base class's own method), e.g. GPUModelRunner.execute_model(self, ...).
            handed_on = (callee is not None and raised_in(callee[0], speculators, vllm, own) == "vllm"
                         and callee[2].rsplit(".", 1)[-1] == entry[2].rsplit(".", 1)[-1]
                         and entry[3] is not None and callee[3] == entry[3])
            if not handed_on:
                return "stand-in", entry
        if where != "other":
            # Frames of neither (torch's inference_mode wrapper between a stand-in and the vLLM
            # method it hands on to) do not hide the call.
            callee = entry
    return None


def _cannot(failure, entry, own, exc):
    path, line, qualname, _ = entry
    module = (os.path.relpath(path, own) if _inside(path, own)
              else f"{os.path.basename(path)}, written by the rehearsal" if _written(path) else path)
    member = _member(qualname)
    failure["stand_in"] = {"module": module, "member": member, "line": line}
    failure["exception"] = (f"cannot rehearse on this vLLM: the stand-in {member} ({module}) does not fit: "
                            f"{type(exc).__name__}: {message(exc)}")
    return CANNOT, failure


def classify(exc, stage, speculators, vllm, worker_exc=None, own=OWN_ROOT, standins=None, speculators_fns=None):
    """(outcome, failure) for an exception that ended the run.

    Set-up failures mean the stand-ins do not fit this vLLM. An exception raised on the worker
    and surfaced through collective_rpc is described from the worker's side. Otherwise the frame
    `deciding_frame` finds decides: a stand-in's is "cannot rehearse" naming it, speculators' is
    a failure. `standins` / `speculators_fns`: {qualname: (file, line)} of the stand-in functions
    and of speculators' (default: the live ones defined under `own` / `speculators`)."""
    failure = describe(exc, speculators, vllm, own)
    if stage == "setup":
        failure["exception"] = f"cannot rehearse on this vLLM: {failure['exception']}"
        return CANNOT, failure
    failure["side"] = "main"
    raised = exc
    if worker_exc is not None and "Worker failed with error" in str(exc):
        surfaced = failure
        failure = describe(worker_exc, speculators, vllm, own)
        failure["side"] = "worker"
        failure["surfaced_as"] = surfaced
        raised = worker_exc
        if failure["speculators_frame"] is None:
            # Raised on the worker outside speculators' code (e.g. the runner's state error):
            # the speculators frame is the call that made the RPC.
            failure["speculators_frame"] = surfaced["speculators_frame"]
    if isinstance(exc, (WrongOutput, RankFailed)) or isinstance(raised, ContractBroken):
        return FAILED, failure
    decided = deciding_frame(raised, speculators, vllm, own, standins, speculators_fns)
    if decided is not None and decided[0] == "stand-in":
        return _cannot(failure, decided[1], own, raised)
    # speculators' frame decided, or neither is on the stack (raised in vLLM alone, e.g. on the
    # worker, where the speculators frame is the call that made the RPC).
    return FAILED, failure


# The worker extension's methods that capture the states (speculators 0.3.0 and 0.4.0 name them alike).
CAPTURE_METHODS = ("_store_captured_states", "_get_captured_states", "_reset_capture", "_setup_hidden_states_capture")


def code_spans(gen_mod, extension):
    """Where speculators' code that produced the data lives: generate() and the worker extension's
    capture methods (for the rule that fixes it), as CodeSpans relative to site-packages. The
    rehearsal's and the real engine's verdicts name the same spans."""
    import inspect

    from .handoff import CodeSpan

    spec_root = os.path.dirname(os.path.dirname(os.path.abspath(gen_mod.__file__)))
    base = os.path.dirname(spec_root)
    funcs = [gen_mod.VllmHiddenStatesGenerator.generate]
    funcs += [fn for fn in (getattr(extension, name, None) for name in CAPTURE_METHODS) if fn is not None]
    spans = []
    for fn in funcs:
        try:
            lines, first = inspect.getsourcelines(fn)
            source = inspect.getsourcefile(fn)
        except (OSError, TypeError):
            continue
        if source is not None:
            spans.append(CodeSpan(os.path.relpath(os.path.abspath(source), base), first, first + len(lines) - 1,
                                  fn.__name__))
    return spans
