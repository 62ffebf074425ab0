from vllm_shim_patch.cli import main

main(prog_name="patch-speculators")
