"""The worker processes of a world of many ranks as the run reads them (a `protocols.Workers`):
each question an RPC through vLLM's own MultiprocExecutor.collective_rpc, answered by every rank
or by rank 0. No vLLM imported here.
"""

from ...answer import RankFailed
from . import ranks


class RankWorkers:
    """`executor`: the generator's MultiprocExecutor; `reference`: the unsharded model's runner
    (in this process); `extension`: the class of speculators' worker extension."""

    in_process = False

    def __init__(self, executor, reference, extension, folder, method):
        self.executor, self.folder = executor, folder
        self.model = reference.model
        self.forward = reference._forward
        self.extension = extension
        pc = executor.parallel_config
        self.topology = {
            "tensor_parallel_size": pc.tensor_parallel_size, "pipeline_parallel_size": pc.pipeline_parallel_size,
            "world_size": executor.world_size, "output_rank": executor.output_rank,
            "workers": f"{executor.world_size} worker processes ({method})",
            "dtype": str(executor.vllm_config.model_config.dtype).replace("torch.", "")}
        self.states = []

    def set_reorder(self, threshold):
        self.executor.collective_rpc("rehearse_reorder", args=(threshold,))

    def steps(self):
        return self.executor.collective_rpc("rehearse_steps", unique_reply_rank=0)

    def after_call(self):
        """Every rank's state, from every rank. Each rank runs its RPCs in order and its tap writes
        before its loop goes on, so once every rank answered, a failure of any earlier RPC on any
        rank is in the folder: one the generator was never told of fails the call here."""
        self.states = self.executor.collective_rpc("rehearse_state")
        found = ranks.read(self.folder)
        if found:
            first = found[0]
            raise RankFailed(f"rank {first['rank']} raised, and vLLM read no reply from it: "
                                   f"{first['failure'].get('exception')}")

    def holds(self):
        """From the states `after_call` read."""
        return ranks.holds(self.states)

    def shapes(self):
        """Each rank's {parameter: [local shape, whole shape]}."""
        return self.executor.collective_rpc("rehearse_shapes")

    def states_now(self, timeout=30):
        """Every rank's state asked now (after a failure), or None when the executor no longer
        answers."""
        if getattr(self.executor, "is_failed", False) or getattr(self.executor, "shutting_down", False):
            return None
        try:
            return self.executor.collective_rpc("rehearse_state", timeout=timeout)
        except Exception:  # noqa: BLE001 - a failed executor: nothing more to read
            return None
