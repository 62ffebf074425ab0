"""libcst codemod CLI contender for bench_dryrun.py (run with PYTHONPATH=bench)."""
