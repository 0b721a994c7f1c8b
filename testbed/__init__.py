"""What the tests and the benchmarks both run, kept out of the anyjev package (pyproject.toml packages anyjev only) and
out of tests/, which bench/ does not import: a stand-in vLLM server (:mod:`testbed.vllm_server`, its answers in
:mod:`testbed.replies`) and the check that a run reproduces a committed summary table (:mod:`testbed.reproduce`)."""
