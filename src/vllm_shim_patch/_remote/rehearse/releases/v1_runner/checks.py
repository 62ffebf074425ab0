"""The Model Runner V1 stand-in's self-checks: the runner against the GPUModelRunner it replaces,
by the names that code uses and its signatures (never its source text). No vLLM imported here:
the parts and vLLM's classes are passed in. They hold wherever the worker runs.
"""

import inspect

from ...selfcheck import code_names, runner_attrs_used, self_attrs

# The Worker methods the rehearsal's run reaches (what they ask of the model runner is checked).
WORKER_PATHS = ["load_model", "get_kv_cache_spec", "initialize_from_config", "compile_or_warm_up_model",
                "execute_model", "sample_tokens", "get_model", "shutdown"]


def runner(run, ours, real, worker_cls, output_cls, two_phase):
    """The stand-in runner class `ours` against GPUModelRunner (`real`) and the installed Worker."""
    if two_phase:
        _state_guard(run, ours, real)
        _no_state_sample(run, ours, real, output_cls)
        run.check("StandInModelRunner two-phase protocol vs GPUModelRunner.execute_model",
                  "execute_model_state" in code_names(real.execute_model),
                  "installed execute_model no longer keeps execute_model_state for sample_tokens")
    _worker_use(run, ours, worker_cls)
    _signatures(run, ours, real)
    _update_states(run, ours, real)


def _state_guard(run, ours, real):
    """Runner state protocol vs the real GPUModelRunner: its guard, probed on a bare instance."""
    probe = ours.__new__(ours)
    probe.execute_model_state = object()
    try:
        real.execute_model(probe, None)
        ok, detail = False, "execute_model with pending state did not raise"
    except RuntimeError as e:
        ok, detail = "State error" in str(e), str(e)
    except Exception as e:  # noqa: BLE001
        ok, detail = False, f"{type(e).__name__}: {e}"
    run.check("StandInModelRunner state guard vs GPUModelRunner.execute_model", ok, detail)


def _no_state_sample(run, ours, real, output_cls):
    probe = ours.__new__(ours)
    probe.execute_model_state = None
    probe.kv_connector_output = None
    probe.use_async_scheduling = False
    try:
        # The stand-in hands this case to the real method, so what it answers is vLLM's own:
        # None up to 0.32, an empty ModelRunnerOutput from 0.33. The probe checks that the real
        # method runs on the state the stand-in keeps, and answers "nothing sampled".
        r = real.sample_tokens(probe, None)
        ok = r is None or (isinstance(r, output_cls) and not r.req_ids)
        detail = f"returned {r!r}"
    except Exception as e:  # noqa: BLE001
        ok, detail = False, f"{type(e).__name__}: {e}"
    run.check("StandInModelRunner no-state sample_tokens vs GPUModelRunner.sample_tokens", ok, detail)


def _worker_use(run, ours, worker_cls):
    """Everything the installed Worker asks of its model runner on the paths we run."""
    used = runner_attrs_used(worker_cls, WORKER_PATHS)
    missing = sorted(a for a in used if a not in ours.PROVIDES and a not in ours.NOT_REACHED)
    run.check("StandInModelRunner vs Worker's use of model_runner", not missing,
              f"Worker uses {missing} which the stand-in does not provide")


def _signatures(run, ours, real):
    params = list(inspect.signature(real.load_model).parameters)[1:]
    run.check("StandInModelRunner.load_model vs GPUModelRunner.load_model",
              set(params) <= set(ours.LOAD_MODEL_ARGS),
              f"{inspect.signature(real.load_model)}: the stand-in honours {sorted(ours.LOAD_MODEL_ARGS)}")
    names = list(inspect.signature(real.initialize_kv_cache).parameters)
    later = [p for p in list(inspect.signature(real.initialize_kv_cache).parameters.values())[2:]
             if p.default is inspect.Parameter.empty]
    run.check("StandInModelRunner.initialize_kv_cache vs GPUModelRunner.initialize_kv_cache",
              names[:2] == ["self", "kv_cache_config"] and not later,
              f"{inspect.signature(real.initialize_kv_cache)}: the stand-in takes kv_cache_config, "
              "and later parameters only with defaults")
    for name in ("execute_model", "sample_tokens"):
        theirs, mine = inspect.signature(getattr(real, name)), inspect.signature(getattr(ours, name))
        run.check(f"StandInModelRunner.{name} vs GPUModelRunner.{name}",
                  list(theirs.parameters) == list(mine.parameters), f"{theirs} != {mine}")


def _update_states(run, ours, real):
    """The real _update_states runs on the stand-in: everything it touches on self is there; and
    the token order re-stated from execute_model/_prepare_inputs reads what the runner has."""
    unset = sorted(a for a in self_attrs(real._update_states)
                   if a not in ours.INSTANCE_ATTRS and a not in ours.SPEC_DECODE_ONLY and not hasattr(ours, a))
    run.check("StandInModelRunner vs GPUModelRunner._update_states", not unset,
              f"_update_states uses {unset} which the stand-in does not set")
    wanted = {"req_ids", "num_scheduled_tokens"} - code_names(real.execute_model)
    wanted |= {"num_computed_tokens_cpu", "token_ids_cpu"} - code_names(real._prepare_inputs)
    run.check("StandInModelRunner token order vs GPUModelRunner._prepare_inputs", not wanted,
              f"the runner no longer orders tokens by {sorted(wanted)}")
