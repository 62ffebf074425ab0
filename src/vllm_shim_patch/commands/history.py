"""`log`: the overlay's history, newest first."""

from __future__ import annotations

from ..report.apply import history_line, untracked_history
from ..settings import NoOptions
from .context import Context, Outcome


def history(ctx: Context, opts: NoOptions) -> Outcome:
    """The overlay's commits, newest first, with their tags."""
    ov = ctx.files.overlay
    if not ov.exists():
        return Outcome(untracked_history(ctx.who), {"commits": []}, 0)
    raw = ov.git("log", "--format=%H%x09%cI%x09%D%x09%s")
    commits = []
    lines = []
    for row in raw.splitlines():
        sha, when, refs, subject = row.split("\t", 3)
        tags = [r.strip().removeprefix("tag: ") for r in refs.split(",") if r.strip().startswith("tag: ")]
        commits.append({"commit": sha, "when": when, "tags": tags, "subject": subject})
        lines.append(history_line(sha, when, subject, tags))
    return Outcome("\n".join(lines), {"overlay": str(ov.gitdir), "commits": commits}, 0)
