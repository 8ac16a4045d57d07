"""The per-tensor calls through cffi's API mode, against the hand-written extension (hvdlite._tensor_calls).

    python bench/binding.py [--launches 3] [--count 256] [--kib 16] [--json PATH]

cffi's API mode compiles its binding as C, out of line (here: a module built once from the core's header into
build/cffi_api_mode), so each C call costs about what a call of the extension does; what stays in Python is what
the extension does in C between calls: reading arguments, filling the request, making and finishing a handle.
This benchmark writes, over the API-mode module, the two per-tensor paths a training step takes, each as lean as
Python makes them, and times them beside the extension's, interleaved in one job, against one all-reduce of the
same bytes (as bench/fusion.py does):

- "prepared": a request prepared once per gradient, submitted with its buffers, then waited for and released,
  as the torch DistributedOptimizer does (the extension's PreparedRequest.submit and Handle.finish);
- "numpy": hvd.allreduce_async(array, name=..., op=Sum) then hvd.synchronize, a name's request kept and its
  output reused (the extension's C path of the NumPy API).

Both API-mode paths are checked against the same float64 sums as the extension's before they are timed. The
question it answers: does one binding technology (cffi, API mode) carry the per-tensor path within 5% of the
extension's time on the figure a user sees (a step of 256 small gradients)?
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import human_bytes, median, median_ratio, say  # noqa: E402

import hvdlite as hvd  # noqa: E402
from hvdlite import build_info, native_header  # noqa: E402
from hvdlite.requests import Collective, PreparedRequest, Request  # noqa: E402

TARGET = 1.05  # the API mode's time within 5% of the extension's
ERROR_BYTES = 512


def api_mode_module():
    """The API-mode binding of the header, compiled once per header into build/cffi_api_mode and imported."""
    import cffi
    import hashlib
    import importlib
    _, declarations = native_header.parsed()
    library = build_info.native_file("libhvdlite_core.so")
    digest = hashlib.sha1((declarations + library).encode()).hexdigest()[:12]
    name = f"_hvdlite_api_{digest}"
    folder = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build", "cffi_api_mode")
    os.makedirs(folder, exist_ok=True)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    if common.rank() == 0 and not any(f.startswith(name) and f.endswith(".so") for f in os.listdir(folder)):
        builder = cffi.FFI()
        builder.cdef(declarations)
        library_dir = os.path.dirname(library)
        builder.set_source(name, '#include "hvdlite.h"', include_dirs=[os.path.dirname(native_header.path())],
                           library_dirs=[library_dir], runtime_library_dirs=[library_dir],
                           libraries=[":libhvdlite_core.so"], extra_compile_args=["-O2"])
        builder.compile(tmpdir=folder, verbose=False)
    common.COMM.Barrier()
    return importlib.import_module(name)


class ApiHandle:
    """A submitted request through the API mode: what the extension's Handle is, in Python."""
    __slots__ = ("lib", "handle", "keepalive")

    def __init__(self, lib, handle, keepalive):
        self.lib, self.handle, self.keepalive = lib, handle, keepalive

    def finish(self):
        code = self.lib.hvdlite_wait(self.handle)  # cffi releases the GIL around the call
        self.lib.hvdlite_release(self.handle)
        self.keepalive = None
        if code != 0:
            raise RuntimeError(f"collective failed ({code})")


class ApiPreparedRequest:
    """PreparedRequest over the API mode: the C request filled once and registered (hvdlite_prepare); each submit
    copies it with the new buffers (so that threads cannot swap each other's) and enqueues the copy."""

    def __init__(self, ffi, lib, name, array, op):
        self.ffi, self.lib = ffi, lib
        self.name = ffi.new("char[]", name.encode())
        self.shape = ffi.new("int64_t[]", list(array.shape))
        self.request = ffi.new("hvdlite_request *")
        r = self.request
        r.collective, r.name, r.dtype, r.ndim, r.shape = Collective.ALLREDUCE, self.name, lib.HVDLITE_FLOAT32, \
            array.ndim, self.shape
        r.reduce_op, r.prescale_factor, r.postscale_factor = op, 1.0, 1.0
        self.error = ffi.new("char[]", ERROR_BYTES)
        r.prepared = lib.hvdlite_prepare(r, self.error, ERROR_BYTES)
        if r.prepared <= 0:
            raise RuntimeError(ffi.string(self.error).decode())
        self.copy = ffi.new("hvdlite_request *")

    def submit(self, input, output, keepalive):
        ffi, copy = self.ffi, self.copy
        copy[0] = self.request[0]
        copy.input = ffi.from_buffer(input)
        copy.output = ffi.from_buffer(output)
        handle = self.lib.hvdlite_enqueue(copy, self.error, ERROR_BYTES)
        if handle < 0:
            raise RuntimeError(ffi.string(self.error).decode())
        return ApiHandle(self.lib, handle, keepalive)


class ApiNumpyAllreduce:
    """hvd.allreduce_async(array, name=..., op=...) and synchronize over the API mode: a name's prepared request
    kept with its output (reused once its last result is synchronized), int handles in a dict."""

    def __init__(self, ffi, lib):
        self.ffi, self.lib = ffi, lib
        self.named = {}
        self.pending = {}
        self.next_id = 0

    def allreduce_async(self, array, name, op):
        entry = self.named.get(name)
        if entry is None or entry[1].shape != array.shape or entry[1].dtype != array.dtype:
            entry = self.named[name] = (ApiPreparedRequest(self.ffi, self.lib, name, array, op),
                                        np.empty_like(array))
        prepared, output = entry
        self.next_id += 1
        self.pending[self.next_id] = (prepared.submit(array, output, array), output)
        return self.next_id

    def synchronize(self, handle_id):
        handle, output = self.pending.pop(handle_id)
        handle.finish()
        return output


def methods_for(count, elements):
    api = api_mode_module()
    ffi, lib = api.ffi, api.lib
    rank = common.rank()
    xs = [np.full(elements, rank + 1 + i % 7, dtype=np.float32) for i in range(count)]
    outs = [np.empty_like(x) for x in xs]
    api_outs = [np.empty_like(x) for x in xs]

    def request(x, out, name):
        return Request(Collective.ALLREDUCE, name, "float32", x.shape, x, out, op=hvd.Sum, keepalive=(x, out))

    extension = [(PreparedRequest(request(x, o, f"binding.ext.{i}")), x, o, (x, o)) for i, (x, o) in
                 enumerate(zip(xs, outs))]
    api_prepared = [(ApiPreparedRequest(ffi, lib, f"binding.api.{i}", x, hvd.Sum), x, o, (x, o)) for i, (x, o) in
                    enumerate(zip(xs, api_outs))]

    def prepared_extension():
        handles = [p.submit(x, out, keep) for p, x, out, keep in extension]
        for h in handles:
            h.finish()

    def prepared_api_mode():
        handles = [p.submit(x, out, keep) for p, x, out, keep in api_prepared]
        for h in handles:
            h.finish()

    names = [f"binding.np.{i}" for i in range(count)]
    api_names = [f"binding.apinp.{i}" for i in range(count)]
    api_numpy = ApiNumpyAllreduce(ffi, lib)

    def numpy_extension():
        return [hvd.synchronize(h) for h in [hvd.allreduce_async(x, name=n, op=hvd.Sum) for n, x in zip(names, xs)]]

    def numpy_api_mode():
        ids = [api_numpy.allreduce_async(x, n, hvd.Sum) for n, x in zip(api_names, xs)]
        return [api_numpy.synchronize(i) for i in ids]

    big = np.full(count * elements, rank + 1, dtype=np.float32)
    big_out = np.empty_like(big)
    big_request = PreparedRequest(request(big, big_out, "binding.one"))

    def one():
        big_request.submit(big, big_out, (big, big_out)).finish()

    expected = [np.full(elements, sum(r + 1 + i % 7 for r in range(common.size())), np.float64) for i in range(count)]
    prepared_extension()
    prepared_api_mode()
    for label, results in (("prepared, extension", outs), ("prepared, API mode", api_outs),
                           ("numpy, extension", numpy_extension()), ("numpy, API mode", numpy_api_mode())):
        if not all(np.array_equal(r.astype(np.float64), e) for r, e in zip(results, expected)):
            raise SystemExit(f"binding: wrong all-reduce result ({label})")
    return {"one": one, "prepared_extension": prepared_extension, "prepared_api_mode": prepared_api_mode,
            "numpy_extension": numpy_extension, "numpy_api_mode": numpy_api_mode}


# (key, label) in table order; each path's API-mode time is compared with its extension's.
VARIANTS = [("one", "one all-reduce of the same bytes"),
            ("prepared_extension", "prepared request per tensor, extension (PreparedRequest)"),
            ("prepared_api_mode", "prepared request per tensor, cffi API mode"),
            ("numpy_extension", "hvd.allreduce_async per array, extension (C path)"),
            ("numpy_api_mode", "hvd.allreduce_async per array, cffi API mode")]
PATHS = ("prepared", "numpy")


def plot(result, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels = ["one all-reduce\n(same bytes)", "prepared,\nextension", "prepared,\ncffi API mode",
              "numpy API,\nextension", "numpy API,\ncffi API mode"]
    values = [result["times_ms"][key] for key, _ in VARIANTS]
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.bar(labels, values, color=["#777", "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"])
    ax.tick_params(axis="x", labelsize=8)
    ax.set_ylabel("ms a step (median)")
    ax.set_title(f"{result['count']} x {human_bytes(result['bytes_each'])} all-reduces, one binding or the other")
    common.save_figure(fig, path)


def checks_for(ratios):
    return [{"target": f"{path}: cffi API mode within {TARGET:.2f}x the extension's time",
             "ratio": f"{path}_api_vs_ext",
             "measured": round(ratios[f"{path}_api_vs_ext"], 3), "pass": ratios[f"{path}_api_vs_ext"] <= TARGET}
            for path in PATHS]


def tables(times, ratios, checks):
    rows = [[label, f"{times[key]:.3f}", f"{times[key] / times['one']:.2f}"] for key, label in VARIANTS]
    text = common.format_table(["variant", "ms a step (median)", "x one all-reduce"], rows)
    target_rows = [[c["target"], f"{c['measured']:.3f}", common.verdict(c["pass"])] for c in checks]
    return text + "\n\n" + common.format_table(["target", "API mode / extension", "result"], target_rows)


def measure(args):
    os.environ.setdefault("HVDLITE_CACHE_CAPACITY", str(1 << (5 * args.count + 1).bit_length()))
    hvd.init()
    rounds = common.interleaved(methods_for(args.count, args.kib * 256), args.repeats, max(args.budget, 0.2))
    hvd.shutdown()
    times = {k: median(v) * 1e3 for k, v in rounds.items()}
    ratios = {f"{path}_api_vs_ext": median_ratio(rounds[f"{path}_api_mode"], rounds[f"{path}_extension"])
              for path in PATHS}
    per_tensor_us = {path: (times[f"{path}_api_mode"] - times[f"{path}_extension"]) * 1e3 / args.count
                     for path in PATHS}
    checks = checks_for(ratios)
    text = tables(times, ratios, checks)
    say(f"\n{args.count} x {human_bytes(args.kib * 1024)} float32, {common.size()} ranks\n" + text)
    return {"benchmark": "binding", "machine": common.machine_info(), "count": args.count,
            "bytes_each": args.kib * 1024, "repeats": args.repeats, "launches": 1, "times_ms": times,
            "ratios": ratios, "extra_us_per_tensor": per_tensor_us, "targets": checks, "table": text}


def over_launches(args):
    runs = common.separate_launches(os.path.abspath(__file__), args.launches,
                                    ["--count", str(args.count), "--kib", str(args.kib), "--repeats", str(args.repeats),
                                     "--budget", str(args.budget)])
    times = {key: median([run["times_ms"][key] for run in runs]) for key, _ in VARIANTS}
    per_launch = {key: [run["ratios"][key] for run in runs] for key in runs[0]["ratios"]}
    ratios = {k: median(v) for k, v in per_launch.items()}
    checks = checks_for(ratios)
    for check in checks:
        check["launches"] = [round(r, 3) for r in per_launch[check["ratio"]]]
    text = tables(times, ratios, checks)
    print(f"\n{args.count} x {human_bytes(runs[0]['bytes_each'])} float32, {runs[0]['machine']['ranks']} ranks, "
          f"median of {args.launches} launches\n" + text, flush=True)
    machine = common.launches_machine(runs)
    extra = {path: median([run["extra_us_per_tensor"][path] for run in runs]) for path in PATHS}
    return {"benchmark": "binding", "machine": machine, "count": args.count, "bytes_each": runs[0]["bytes_each"],
            "repeats": args.repeats, "launches": args.launches, "times_ms": times, "ratios": ratios,
            "ratio_launches": per_launch, "extra_us_per_tensor": extra, "targets": checks, "table": text}


def main():
    parser = common.base_arguments(__doc__.splitlines()[0], "binding")
    common.add_launch_arguments(parser, launches=3)
    common.run_launches(parser.parse_args(), over_launches, measure)

if __name__ == "__main__":
    main()
