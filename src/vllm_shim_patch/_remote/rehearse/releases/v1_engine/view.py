"""The one in-process worker as the run reads it (a `protocols.Workers`): its runner and its
capture state read directly. No vLLM imported here.
"""


class InProcessWorkers:
    """The worker of the one in-process WorkerProc: tensor parallel 1, pipeline parallel 1."""

    in_process = True

    def __init__(self, worker, executor):
        self.worker = worker
        self.runner = worker.model_runner
        self.model = self.runner.model
        self.forward = self.runner._forward
        self.extension = type(worker)
        self.topology = {"tensor_parallel_size": 1, "pipeline_parallel_size": 1, "world_size": 1,
                         "output_rank": getattr(executor, "output_rank", 0), "workers": "in-process"}

    def set_reorder(self, threshold):
        self.runner.reorder_batch_threshold = threshold

    def steps(self):
        return self.runner.steps

    def holds(self):
        """What speculators' worker extension still holds after a call (it must hold nothing)."""
        return held(self.worker)

    def after_call(self):
        """One worker in this process: its failures surface where they are raised."""


def held(worker):
    """The capture state a worker (speculators' extension mixed in) still holds."""
    out = []
    if getattr(worker, "_captured_states", None) is not None:
        out.append("_captured_states")
    if getattr(worker, "_request_metadata", None):
        out.append("_request_metadata")
    return out
