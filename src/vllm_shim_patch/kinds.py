"""The bottom layer: the closed vocabularies every layer speaks (what the engine did at a site, a
file's status, how a call binds, a signature's source, the state of an installed package, a
rule's opt-ins), as string enums that print as their values.

Standard library only, and nothing of the package imported.
"""

from __future__ import annotations

import enum


class Word(str, enum.Enum):
    """A string enum that prints as its value on every Python (3.11 changed `Enum.__format__`)."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class Action(Word):
    """What the engine did at one call site, in the order a report lists them."""

    EDITED = "edited"
    NEEDS_HUMAN = "needs-human"
    NOTICE = "notice"
    NOT_NEEDED = "not-needed"
    ALREADY = "already"
    DECLINED = "declined"
    SKIPPED = "skipped"  # a rule --skip or --only left out (named when a rehearsal needs it)


class RuleOption(Word):
    """An opt-in a rule may need (`option:` in its YAML): the rule runs only when it is given."""

    TRUST_REMOTE_CODE = "trust-remote-code"  # run the model's own tokenizer code (Kimi-K2.5)


class FileStatus(Word):
    CHANGED = "changed"
    UNCHANGED = "unchanged"
    SKIPPED = "skipped"  # not parsed (syntax error, unreadable): nothing to say about its calls
    FAILED = "failed"  # a rule or codemod broke on it: the run fails closed


class BindStatus(Word):
    OK = "ok"
    MISMATCH = "mismatch"
    UNKNOWN = "unknown"


class SignatureKind(Word):
    LIVE = "live"  # inspect in the target interpreter
    STATIC = "static"  # vLLM's source read with ast


class PackageState(Word):
    ORIGINAL = "original"
    PATCHED = "patched"
    LOCAL = "local"  # the user's own edits (`local`) on the pristine original, no rule applied
    DRIFTED = "drifted"
    INTERRUPTED = "interrupted"
    BUSY = "busy"
    NOT_TRACKED = "not tracked"
