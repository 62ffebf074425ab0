"""The stand-in for vLLM's Model Runner V1 (`vllm.v1.worker.gpu_model_runner.GPUModelRunner`),
shared by every adapter that drives the V1 runner, in one process or in many. No adapter itself
(it is in no ADAPTERS entry). This face imports no vLLM; the parts import it, one concern a module:

- `shims`: what differs between the V1 releases (ModelRunnerOutput's fields, InputBatch's
  arguments, LateInteractionRunner, set_random_seed, the two-phase step);
- `runner`: the stand-in GPUModelRunner (one per worker; each forward reported to a callback);
- `worker`: the stand-in GPU Worker (init_device only) and the Model Runner V2 refusal;
- `checks`: the self-checks of the runner against GPUModelRunner and the installed Worker (no vLLM).

They assume nothing of where the worker runs.
"""
