from vllm_shim_patch.cli import script

script()
