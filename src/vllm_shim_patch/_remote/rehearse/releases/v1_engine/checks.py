"""The self-checks of the V1 engine's shared stand-ins against the vLLM code they replace, by the
names that code uses and its signatures (never its source text). No vLLM imported here: vLLM's
modules are passed in.

`worker` holds wherever the worker runs; `in_process` checks the in-process queues and WorkerProc.
"""

import inspect

from ...selfcheck import code_names


def worker(run, gpu_worker):
    """The stand-in worker's init_device against what it calls in vLLM."""
    run.check("RehearsalWorker vs init_worker_distributed_environment",
              "backend" in inspect.signature(gpu_worker.init_worker_distributed_environment).parameters)
    # In init_device or a Worker method it calls (0.33: _init_workspace_and_model_runner).
    names = code_names(gpu_worker.Worker.init_device)
    for name in list(names):
        method = getattr(gpu_worker.Worker, name, None)
        if inspect.isfunction(method):
            names |= code_names(method)
    calls, has = "init_workspace_manager" in names, hasattr(gpu_worker, "init_workspace_manager")
    run.check("RehearsalWorker.init_device vs Worker.init_device's workspace manager", calls == has,
              f"Worker.init_device calls init_workspace_manager: {calls}; gpu_worker defines it: {has}")


def in_process(run, mpe):
    """The in-process queues and WorkerProc against MultiprocExecutor and WorkerProc."""
    names = code_names(mpe.MultiprocExecutor.collective_rpc)
    run.check("in-process queues vs MultiprocExecutor.collective_rpc",
              {"rpc_broadcast_mq", "enqueue", "dequeue", "response_mqs"} <= names,
              "collective_rpc no longer talks to rpc_broadcast_mq/response_mqs")
    names = code_names(mpe.WorkerProc.__init__)
    run.check("InProcWorkerProc vs WorkerProc.__init__",
              {"_init_message_queues", "init_worker"} <= names,
              "WorkerProc.__init__ no longer builds its worker/queues the expected way")
    run.check("InProcWorkerProc._init_message_queues vs WorkerProc._init_message_queues",
              list(inspect.signature(mpe.WorkerProc._init_message_queues).parameters)
              == ["self", "input_shm_handle", "vllm_config"],
              str(inspect.signature(mpe.WorkerProc._init_message_queues)))
    names = code_names(mpe.WorkerProc.worker_busy_loop)
    # 0.33 moved the body of the loop (the call and its reply) into _execute_worker_rpc.
    for helper in ("_execute_worker_rpc",):
        if helper in names and hasattr(mpe.WorkerProc, helper):
            names |= code_names(getattr(mpe.WorkerProc, helper))
    run.check("BroadcastMQ vs WorkerProc.worker_busy_loop",
              {"rpc_broadcast_mq", "dequeue", "handle_output"} <= names,
              f"the loop no longer dequeues from rpc_broadcast_mq and replies by handle_output: {sorted(names)}")
