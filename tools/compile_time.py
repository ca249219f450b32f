#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What including cairn costs a translation unit: compiler CPU time, compiler peak memory and
stripped binary size of the programs in bench/compile_time/, each beside the same program with
cereal alone and with Eigen alone, compiled in the same run (figures, not a timed test: CI
prints them so that a regression shows in every log). See docs/compile-time.md.

    python3 tools/compile_time.py [--cxx g++] [--opt -O2] [--repeat N] [--jobs N] [--only NAME,...] [--instructions]

Each program is compiled --repeat times (default 1), the small ones (a few seconds, where this
machine's noise is a large share) at least 5 times, and the fastest run is reported. --jobs 2
(CI) builds two programs at a time: each figure is still the CPU time of that program's own
compiler processes, but reads higher than alone (two compilers share the caches; -2% to +21%
in one comparison, docs/compile-time.md)."""
import argparse
import concurrent.futures
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
SRC = ROOT / "bench" / "compile_time"


def eigen_include():
    for d in ("/usr/include/eigen3", "/usr/local/include/eigen3"):
        if pathlib.Path(d, "Eigen", "Core").exists():
            return ["-I" + d]
    return []


def source_path(src):
    return src if os.path.isabs(src) else str(SRC / src)


def compile_once(cxx, args, out):
    """Compiles once; returns (cpu seconds, peak KiB) of the compiler driver and the processes
    it waited for (cc1plus, as, ld), from wait4's resource usage of that one child."""
    proc = subprocess.Popen([cxx] + args + ["-o", str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    output = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.stderr.write(output.decode(errors="replace")[-4000:])
        raise SystemExit(f"compile_time: {' '.join([cxx] + args)} failed")
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss


def count_instructions(cxx, args, out, work):
    """Instructions the compiler driver and its children (cc1plus, as, ld) execute, counted by
    valgrind's cachegrind: unlike CPU seconds, the same on every run and every machine of one
    toolchain, so a change shows even on a machine whose speed wanders (docs/compile-time.md)."""
    cg = pathlib.Path(tempfile.mkdtemp(prefix="cg-", dir=work))
    subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no", "--trace-children=yes",
                    "--cachegrind-out-file=" + str(cg / "out.%p"), cxx] + args + ["-o", str(out)],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    total = 0
    for f in cg.iterdir():
        for line in f.read_text().splitlines():
            if line.startswith("summary:"):
                total += int(line.split()[1])
    shutil.rmtree(cg, ignore_errors=True)
    return total


def stripped_size(binary, work):
    s = pathlib.Path(work, binary.name + ".stripped")
    subprocess.run(["strip", "-o", str(s), str(binary)], check=True)
    return s.stat().st_size


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cxx", default=os.environ.get("CXX", "g++"))
    p.add_argument("--opt", default="-O2")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--jobs", type=int, default=1,
                   help="programs built at a time (default 1: the figures docs/compile-time.md quotes)")
    p.add_argument("--only", default="")
    p.add_argument("--instructions", action="store_true",
                   help="also count the compiler's instructions with valgrind (one more build of each, about 20x slower)")
    a = p.parse_args()

    common = ["-std=c++20", a.opt, "-I" + str(ROOT / "include"), "-I" + str(SRC)] + eigen_include()
    work = pathlib.Path(tempfile.mkdtemp(prefix="cairn-compile-time-"))
    # name: (what it is, [(source, extra flags, object only?)...]); a program that links is run.
    # A program of several steps (the separately compiled runtime, then the user's file and the
    # link) reports the steps' sum, and the user's file alone.
    runtime_obj = work / "cairn_runtime.o"
    programs = {
        "eigen_only": ("the program with Eigen alone", [("eigen_only.cpp", [], False)]),
        "cereal_only": ("the program with cereal alone", [("with_cereal.cpp", [], False)]),
        "cairn": ("the program with cairn, header-only (the default)", [("with_cairn.cpp", ["-pthread"], False)]),
        "cairn_separate_runtime": ("cairn's runtime, compiled once (CAIRN_SEPARATE_COMPILATION)",
                                   [(str(ROOT / "src" / "cairn.cpp"),
                                     ["-DCAIRN_SEPARATE_COMPILATION", "-ffunction-sections", "-fdata-sections", "-c"], True)]),
        "cairn_separate": ("the program with cairn, separate compilation: its own file and the link",
                           [("with_cairn.cpp", ["-DCAIRN_SEPARATE_COMPILATION", "-pthread", str(runtime_obj)], False)]),
        "cairn_separate_gc": ("the same, linked with -Wl,--gc-sections (only the runtime's functions it calls)",
                              [("with_cairn.cpp", ["-DCAIRN_SEPARATE_COMPILATION", "-pthread", str(runtime_obj),
                                                   "-Wl,--gc-sections"], False)]),
        "cairn_shared_runtime": ("cairn's runtime as a shared library, libcairn.so (CMake: CAIRN_SHARED=ON)",
                                 [(str(ROOT / "src" / "cairn.cpp"),
                                   ["-DCAIRN_SEPARATE_COMPILATION", "-fPIC", "-shared", "-pthread"], True)]),
        "cairn_separate_shared": ("the program with cairn, separate compilation, linked to libcairn.so: its file and the link",
                                  [("with_cairn.cpp", ["-DCAIRN_SEPARATE_COMPILATION", "-pthread", "-L" + str(work), "-lcairn",
                                                       "-Wl,-rpath," + str(work)], False)]),
        "model_header": ("a model header's file: Eigen structs, no cairn", [("model_header.cpp", ["-c"], True)]),
        "model_header_tree": ("the same with <cairn/tree.hpp> and CAIRN_TREE", [("model_header.cpp", ["-c", "-DWITH_CAIRN_TREE"], True)]),
    }
    only = [n for n in a.only.split(",") if n]
    for needs, runtime in (("cairn_separate", "cairn_separate_runtime"), ("cairn_separate_gc", "cairn_separate_runtime"),
                           ("cairn_separate_shared", "cairn_shared_runtime")):
        if needs in only and runtime not in only:
            only.insert(only.index(needs), runtime)
    results = {}
    counted = {}  # instructions, with --instructions
    print(f"compile_time: {a.cxx} {a.opt}, {os.cpu_count()} cores; CPU seconds of the compiler (user+sys), "
          f"best of {a.repeat} (of at least 5 for the programs of a few seconds)")
    def measure(name, steps):
        """One build of a program (all its steps): (cpu seconds, peak KiB, output)."""
        cpu_sum, peak = 0.0, 0
        for src, extra, obj_only in steps:
            out = (runtime_obj if name == "cairn_separate_runtime" else work / "libcairn.so" if name == "cairn_shared_runtime"
                   else work / (name + (".o" if obj_only else "")))
            cpu, kib = compile_once(a.cxx, common + [source_path(src)] + extra, out)
            cpu_sum += cpu
            peak = max(peak, kib)
        return cpu_sum, peak, out

    # The model header with and without cairn/tree.hpp are built in turn, A B A B ..., so that
    # a slow spell of the machine falls on both and their difference stays meaningful.
    best = {}
    pair = [n for n in ("model_header", "model_header_tree") if not only or n in only]

    def build_pair():
        for _ in range(max(a.repeat, 5)):
            for name in pair:
                r = measure(name, programs[name][1])
                if name not in best or r[0] < best[name][0]:
                    best[name] = r

    def build(name):
        """Builds one program its number of times, checks what it built, and returns its line."""
        what, steps = programs[name]
        if name not in best:
            small = name in ("eigen_only", "cereal_only")
            for _ in range(max(a.repeat, 5) if small else a.repeat):
                r = measure(name, steps)
                if name not in best or r[0] < best[name][0]:
                    best[name] = r
        cpu, peak, out = best[name]
        # The shared runtime is an output of its own: its size, though it is not a program to run.
        size = stripped_size(out, work) if not steps[-1][2] or name == "cairn_shared_runtime" else None
        if size is not None and name != "cairn_shared_runtime":
            run = subprocess.run([str(out), str(work / (name + ".ckpt"))])
            if run.returncode != 0:
                raise SystemExit(f"compile_time: {name} built but its round trip failed ({run.returncode})")
        instr = ""
        if a.instructions:
            n = 0
            for src, extra, obj_only in steps:
                n += count_instructions(a.cxx, common + [source_path(src)] + extra, work / (name + ".counted"), work)
            instr = f"{n / 1e9:6.2f} G instr  "
            counted[name] = n
        results[name] = (cpu, peak, size)
        size_s = f"{size / 1024:7.0f} KiB stripped" if size is not None else " " * 20
        return f"  {name:24s} {cpu:6.2f} s  {peak / 1024:6.0f} MiB  {size_s}  {instr}{what}"

    # Programs that need another's output (the runtime, then the programs linked to it) are built
    # in one group, in order; the groups, longest first, go to --jobs workers. A program no group
    # names is a group of its own, last.
    wanted = [n for n in programs if not only or n in only]
    groups = [[n for n in g if n in wanted] for g in (
        ["cairn_separate_runtime", "cairn_separate", "cairn_separate_gc"],
        ["cairn_shared_runtime", "cairn_separate_shared"], ["cairn"], pair, ["eigen_only", "cereal_only"])]
    groups += [[n] for n in wanted if not any(n in g for g in groups)]
    lines = {}

    def build_group(group):
        if group and group[0] in pair:
            build_pair()  # both, alternated, before either's line
        for name in group:
            lines[name] = build(name)

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(a.jobs, 1)) as pool:
        for f in [pool.submit(build_group, g) for g in groups if g]:
            f.result()
    for name in wanted:
        print(lines[name])
    if "model_header" in results and "model_header_tree" in results:
        print(f"  <cairn/tree.hpp> adds {results['model_header_tree'][0] - results['model_header'][0]:.2f} s "
              f"to a model header's file")
        if "model_header" in counted and "model_header_tree" in counted:
            print(f"  <cairn/tree.hpp> adds {(counted['model_header_tree'] - counted['model_header']) / 1e9:.2f} G instructions "
                  f"({counted['model_header_tree'] / counted['model_header'] - 1:.0%}) to a model header's file")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
