#!/usr/bin/env bash
# The kernel replay check (Note [Kernel replay] in inductor/kernel_manifest.cpp).
#   .ci/kernel_replay.sh check  RAW_DIR   compare RAW_DIR/<runner>.raw with tests/kernel_replay/<runner>.txt
#   .ci/kernel_replay.sh update RAW_DIR   rewrite tests/kernel_replay/<runner>.txt from the raw files
# RAW_DIR holds what the test runners appended under KILN_KERNEL_MANIFEST
# (ctest sets it: build/kernel_replay/cpp.raw, python.raw). A runner whose
# raw file is missing or empty (not run) is skipped. Exit 1 when a manifest differs:
# the kernels that appeared, vanished or whose generated code changed are
# listed with the tests that made them.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mode="${1:-}"
raw_dir="${2:-}"
if [[ "$mode" != check && "$mode" != update ]] || [[ -z "$raw_dir" ]]; then
  echo "usage: $0 check|update RAW_DIR" >&2
  exit 2
fi
exec python3 - "$mode" "$raw_dir" <<'PY'
import os
import sys

mode, raw_dir = sys.argv[1], sys.argv[2]
HEADER = ("# Every distinct kernel the {runner} tests generate: kind, digest of its\n"
          "# loop-level text, digest of its generated code per vector unit class\n"
          "# (ISA=digest; Note [Kernel replay] in inductor/kernel_manifest.cpp).\n"
          "# Rewritten by .ci/kernel_replay.sh update; reviewed like code: a diff\n"
          "# here is a change of generated kernels.\n")


def host_isa():
    """The vector unit class of this host, which the CPU kernels' IR depends on:
    its vector widths follow the host's features (AVX-512 or AVX2 machines)."""
    flags = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    if "avx512f" in flags:
        return "avx512"
    if "avx2" in flags:
        return "avx2"
    return "other"


# Code digests of manifests written before they were kept per class came
# from AVX-512 hosts.
LEGACY_ISA = "avx512"


def read_raw(path):
    code_of, labels = {}, {}
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split(" ", 3)
            if len(parts) < 3:
                continue
            key = (parts[0], parts[1])
            if code_of.get(key, "-") == "-":
                code_of[key] = parts[2]
            labels.setdefault(key, [])
            label = parts[3] if len(parts) > 3 else "-"
            if label not in labels[key] and len(labels[key]) < 3:
                labels[key].append(label)
    return code_of, labels


def read_manifest(path):
    """{(kind, text): {isa: code}}."""
    entries = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                if line.startswith("#") or not line.strip():
                    continue
                kind, text, *codes = line.split()
                entries[(kind, text)] = dict(c.split("=", 1) if "=" in c else (LEGACY_ISA, c) for c in codes)
    return entries


failed = False
ran = 0
isa = host_isa()
for runner in ("cpp", "python"):
    raw = os.path.join(raw_dir, runner + ".raw")
    manifest = os.path.join("tests", "kernel_replay", runner + ".txt")
    if not os.path.exists(raw) or os.path.getsize(raw) == 0:
        # Every runner makes kernels: nothing recorded means it did not run.
        print(f"kernel replay: {runner}: nothing in {raw} (runner not run), skipped")
        continue
    ran += 1
    code_of, labels = read_raw(raw)
    committed = read_manifest(manifest)
    if mode == "update":
        # This host's class is written; another class's digest of a kernel is
        # kept while this class's code of it is unchanged (a change of code
        # here is taken for a change of the code generator everywhere).
        with open(manifest, "w") as f:
            f.write(HEADER.format(runner=runner))
            for key, code in sorted(code_of.items()):
                codes = dict(committed.get(key, {}))
                if codes.get(isa, code) != code:
                    codes = {}
                codes[isa] = code
                f.write(" ".join(key) + " " + " ".join(f"{i}={c}" for i, c in sorted(codes.items())) + "\n")
        print(f"kernel replay: {runner}: wrote {len(code_of)} kernels ({isa} code) to {manifest}")
        continue
    added = sorted(k for k in code_of if k not in committed)
    removed = sorted(k for k in committed if k not in code_of)
    changed = sorted(k for k in code_of if k in committed and committed[k].get(isa, code_of[k]) != code_of[k])
    unrecorded = sum(1 for k in code_of if k in committed and isa not in committed[k])
    if unrecorded:
        print(f"kernel replay: {runner}: {unrecorded} kernels have no {isa} code digest in {manifest}: "
              "their loop-level text is compared, not their code")
    if not (added or removed or changed):
        print(f"kernel replay: {runner}: {len(code_of)} kernels, as committed in {manifest}")
        continue
    failed = True
    print(f"kernel replay: {runner}: generated kernels differ from {manifest}: "
          f"{len(added)} new, {len(removed)} gone, {len(changed)} with changed code")
    for what, keys in (("new", added), ("code changed", changed)):
        for kind, text in keys:
            print(f"  {what}: {kind} {text} from {', '.join(labels[(kind, text)])}")
    for kind, text in removed:
        print(f"  gone: {kind} {text}")
if failed:
    print("kernel replay: if the change of kernels is intended, run "
          f"'bash .ci/kernel_replay.sh update {raw_dir}' and commit tests/kernel_replay/")
    sys.exit(1)
if ran == 0 and mode == "check":
    print("kernel replay: nothing to check")
PY
