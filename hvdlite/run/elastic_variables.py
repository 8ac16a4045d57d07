"""What hvdliterun's restarts (elastic.py) and the ranks (hvdlite.elastic) agree on: variables the launcher sets on
every rank, and the exit code by which ranks ask for a new start. A module of its own, free of everything else, so
that the ranks import it without the launcher's code and the launcher without the native core."""
JOB_VARIABLE = "HVDLITE_ELASTIC_JOB"          # the same on every start of one job: where the ranks find commits
RESTART_VARIABLE = "HVDLITE_ELASTIC_RESTART"  # which start of the job this is (0 for the first)
NOTIFY_VARIABLE = "HVDLITE_ELASTIC_NOTIFY"    # host:port answering "have the hosts changed?" (elastic.HostNews)
EXIT_HOSTS_UPDATED = 75  # EX_TEMPFAIL, "try again": the ranks stopped at a commit because the hosts changed
