"""Processes that another launcher started (torchrun, torch.multiprocessing.spawn) made into one MPI job: rank 0
runs a PMI-1 server (server.py), the ranks find it through a key-value store they share (join.py), and each starts
MPI with the server as its process manager, as if an MPI launcher had started it."""
