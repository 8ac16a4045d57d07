"""Reading a timeline (Chrome trace) that a job wrote."""
import json


def timeline_phases(path):
    """{tensor name: set of phase names} from a timeline file (json.load fails on invalid JSON)."""
    with open(path) as f:
        events = json.load(f)
    rows = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M"}
    phases = {}
    for e in events:
        if e.get("ph") == "X":
            phases.setdefault(rows[e["tid"]], set()).add(e["name"])
    return phases
