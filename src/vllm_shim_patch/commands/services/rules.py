"""The loaded rules (bundled and --rules) and this run's selection of them (--skip, --only, the
opt-ins given), loaded once; an id --skip or --only names that no rule has is refused here, as
the rules load."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import UsageError

if TYPE_CHECKING:
    from ...rewrite.rule import RulePack
    from ...settings import Settings


class RuleSet:
    """The rules `settings` load and select."""

    def __init__(self, settings: Settings):
        self._settings = settings
        self._full: RulePack | None = None
        self._pack: RulePack | None = None

    @property
    def full(self) -> RulePack:
        """Every loaded rule, --skip and --only not applied (to name a rule a failure needs)."""
        if self._full is None:
            from ...rules.loader import load_pack

            settings = self._settings
            full = load_pack(settings.rules)
            for flag, ids in (("--skip", settings.skip), ("--only", settings.only)):
                unknown = full.unknown(ids)
                if unknown:
                    import difflib

                    known = [r.id for r in full.rules]
                    close = difflib.get_close_matches(unknown[0], known, n=3)
                    hint = (f"did you mean {', '.join(close)}?" if close
                            else f"the rules are {', '.join(known)}")
                    raise UsageError(f"{flag} {unknown[0]!r}: no loaded rule has this id; {hint}")
            options = settings.rule_options
            off = [r for r in full.rules if r.id in settings.only and r.option is not None
                   and r.option not in options]
            if off:
                raise UsageError(f"--only {off[0].id!r}: the rule runs only with --{off[0].option}")
            self._full = full
        return self._full

    @property
    def pack(self) -> RulePack:
        """The rules this run uses: every loaded rule, less --skip, or only --only's."""
        if self._pack is None:
            settings = self._settings
            self._pack = self.full.selected(settings.skip, settings.only, settings.rule_options)
        return self._pack

    @property
    def listed(self) -> RulePack:
        """The rules less --skip, or only --only's, opt-in ones kept whether given or not (`rules
        list`, `rules docs`)."""
        options = frozenset(r.option for r in self.full.rules if r.option is not None)
        return self.full.selected(self._settings.skip, self._settings.only, options)

    @property
    def loaded(self) -> RulePack | None:
        """This run's rules if a step has loaded them already (None: not loaded, and not loaded here)."""
        return self._pack

    @property
    def skipped(self) -> tuple[str, ...]:
        """The ids of the loaded rules this run leaves out (--skip, or not among --only's); a rule
        whose opt-in was not given is not skipped but off (`not_opted`)."""
        kept = {r.id for r in self.pack.rules}
        off = self.not_opted
        return tuple(r.id for r in self.full.rules if r.id not in kept and r.id not in off)

    @property
    def not_opted(self) -> tuple[str, ...]:
        """The ids of the loaded rules left out because their opt-in (`option:`) was not given."""
        options = self._settings.rule_options
        return tuple(r.id for r in self.full.rules if r.option is not None and r.option not in options)
