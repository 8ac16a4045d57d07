"""hvdliterun: a thin front over the MPI library's own mpiexec (`python -m hvdlite.run` is the same)."""
