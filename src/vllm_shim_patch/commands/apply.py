"""`patch-speculators [apply]`: the apply transaction on the target (`patch.py`), and `--wheel-out`,
the same transaction with the patched wheel built from the plan it wrote.

`--dry-run` and `--check` are other entries' modes in the command table (`commands.COMMANDS`):
this module routes nothing and runs no other command.
"""

from __future__ import annotations

from ..errors import UsageError
from ..settings import ApplyOptions
from .context import Context, Outcome
from .patch import patch


def apply(ctx: Context, opts: ApplyOptions) -> Outcome:
    """Plan from the original bytes, write atomically, verify, then commit; restore on failure."""
    # Called from Python with a mode's option, this would write what the caller asked only to see:
    # the command table picks the mode's function (`command("apply").load(opts)`), as the CLI does.
    given = [flag for flag, on in (("dry_run", opts.dry_run), ("check", opts.check),
                                   ("wheel_out", opts.wheel_out is not None)) if on]
    if given:
        raise UsageError(f"apply() writes the install and takes no {given[0]}: run "
                         f"vllm_shim_patch.commands.command('apply').load(opts)(ctx, opts), which picks "
                         f"the function for {given[0]}")
    return patch(ctx, opts).outcome


def wheel_out(ctx: Context, opts: ApplyOptions) -> Outcome:
    """`apply --wheel-out`: the folder and the original wheel checked before anything is written,
    then the apply transaction, then the wheel of the patch it committed, from the plan it wrote."""
    from .patched_wheel import prepare_out, write_out

    out = prepare_out(ctx, opts)
    patched = patch(ctx, opts)
    return write_out(ctx, out, patched.outcome, patched.plan)
