"""What hvdlite's own tests and benchmarks share, importable by both (as torch.testing is): simulated hosts on one
machine (network namespaces: simulated_hosts.py, needs root) and the CPU time of the core's background thread
(core_threads.py). Not part of the training API; nothing in hvdlite imports it."""
