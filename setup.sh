#!/usr/bin/env bash
# kiln's one set-up entry point: installs what is missing (Debian/Ubuntu),
# makes the project's virtual environment (.venv, from Debian's python3 3.11,
# with the pinned torch and model libraries of requirements.txt), configures
# and builds ./build, makes `import kiln` and `kiln` work from anywhere;
# optionally runs the tests or the example.
#
#   ./setup.sh                 set up only
#   ./setup.sh --test          set up, then run the C++ and Python tests
#   ./setup.sh --example       set up, then run examples/compile_mlp.py
#   ./setup.sh --python PATH   build against another CPython 3.11/3.12 with torch
#                              (no venv is made; its packages are the user's)
#
# Environment: KILN_PYTHON (same as --python), KILN_JOBS (parallel jobs,
# default: all cores).
set -euo pipefail

say() { printf 'setup.sh: %s\n' "$*"; }
warn() { printf 'setup.sh: warning: %s\n' "$*" >&2; }
die() { printf 'setup.sh: error: %s\n' "$*" >&2; exit 1; }
trap 'die "unexpected failure at line $LINENO: $BASH_COMMAND"' ERR

usage() { sed -n '2,15s/^# \{0,1\}//p' "$0"; }

run_tests=0
run_example=0
python="${KILN_PYTHON:-}"
while (($#)); do
  case "$1" in
    --test) run_tests=1 ;;
    --example) run_example=1 ;;
    --python)
      (($# >= 2)) || die "--python needs a path"
      python="$2"
      shift ;;
    --python=*) python="${1#--python=}" ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
  shift
done

root="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="$root/build"
venv="$root/.venv"
base_python=/usr/bin/python3  # Debian's: the venv is made from it
jobs="${KILN_JOBS:-$(nproc)}"
cd "$root"

if ((EUID == 0)); then
  sudo=()
elif command -v sudo >/dev/null; then
  sudo=(sudo)
else
  sudo=()
fi

# Absolute, but symlinks kept: a venv's bin/python is a symlink, and its
# path is what tells CPython to use the venv's site-packages.
resolve_python() {
  local p="$1"
  if [[ "$p" != */* ]]; then
    p="$(command -v "$p")" || return 1
  fi
  [[ "$p" == /* ]] || p="$PWD/$p"
  printf '%s\n' "$p"
}
use_venv=0
if [[ -z "$python" ]]; then
  use_venv=1
  python="$venv/bin/python"
else
  python="$(resolve_python "$python")" || die "no python named '$python' on PATH"
fi

# --- Packages -------------------------------------------------------------------
# A package counts as present when dpkg has it or when what it provides is
# already there (a hand-built LLVM, a user's own python), so prepared
# machines install nothing. torch, numpy and pytest come from PyPI into the
# venv (requirements.txt), not from Debian.
required_packages=(python3-dev libgtest-dev libgmock-dev cmake ninja-build g++)
((use_venv)) && required_packages+=(python3-venv)
optional_packages=(llvm-16-dev libbenchmark-dev)

py_ok() { [[ -x "$1" ]] && "$1" -c "$2" >/dev/null 2>&1; }
# The interpreter whose headers the build needs: the venv's base before the
# venv exists.
header_python() { if ((use_venv)); then printf '%s\n' "$base_python"; else printf '%s\n' "$python"; fi; }

provides() {
  case "$1" in
    python3-dev) py_ok "$(header_python)" 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' ;;
    python3-venv) py_ok "$base_python" 'import ensurepip, venv' ;;
    llvm-16-dev) [[ -e /usr/lib/llvm-16/lib/cmake/llvm/LLVMConfig.cmake ]] ;;
    libgtest-dev) [[ -e /usr/include/gtest/gtest.h ]] ;;
    libgmock-dev) [[ -e /usr/include/gmock/gmock.h ]] ;;
    libbenchmark-dev) [[ -e /usr/include/benchmark/benchmark.h ]] ;;
    cmake) command -v cmake >/dev/null &&
             [[ "$(printf '%s\n' 3.25 "$(cmake --version | sed -n '1s/.* //p')" | sort -V | head -n1)" == 3.25 ]] ;;
    ninja-build) command -v ninja >/dev/null ;;
    g++) command -v g++ >/dev/null ;;
    *) return 1 ;;
  esac
}

missing_packages() {
  local installed pkg
  installed="$(dpkg-query -W -f='${db:Status-Abbrev}|${Package}\n' "$@" 2>/dev/null | sed -n 's/^ii *|//p' || true)"
  for pkg in "$@"; do
    grep -qxF -- "$pkg" <<<"$installed" && continue
    provides "$pkg" || printf '%s\n' "$pkg"
  done
}

mapfile -t missing_required < <(missing_packages "${required_packages[@]}")
mapfile -t missing_optional < <(missing_packages "${optional_packages[@]}")
missing=("${missing_required[@]}" "${missing_optional[@]}")
if ((${#missing[@]})); then
  say "installing ${missing[*]}"
  if ! command -v apt-get >/dev/null; then
    ((${#missing_required[@]} == 0)) || die "no apt-get here; install these first: ${missing_required[*]}"
    warn "no apt-get here; building without ${missing_optional[*]}"
  elif ((EUID != 0 && ${#sudo[@]} == 0)); then
    die "not root and no sudo; as root run: apt-get update && apt-get install -y ${missing[*]}"
  elif ! { "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q &&
           "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"; }; then
    # Optional packages may simply not exist in this distribution release.
    mapfile -t missing_required < <(missing_packages "${required_packages[@]}")
    ((${#missing_required[@]} == 0)) || die "apt-get could not install: ${missing_required[*]}"
    warn "apt-get could not install all of ${missing_optional[*]}; building without them"
  fi
fi

# --- Python environment -----------------------------------------------------------
# .venv holds exactly requirements.txt; a stamp of that file's hash says the
# install finished, so later runs (and CI on a machine that already has the
# wheels in pip's cache) skip it.
if ((use_venv)); then
  [[ -x "$base_python" ]] || die "$base_python does not exist (Debian: apt-get install python3)"
  if [[ ! -x "$venv/bin/python" ]]; then
    say "making the virtual environment .venv from $base_python"
    "$base_python" -m venv "$venv" || die "could not make $venv (Debian: apt-get install python3-venv)"
  fi
  stamp="$venv/.kiln-requirements"
  want="$(sha256sum requirements.txt | cut -d' ' -f1)"
  if [[ "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
    say "installing requirements.txt into .venv (torch is a CUDA build of several GB: minutes the first time)"
    rm -f "$stamp"
    "$python" -m pip install --disable-pip-version-check -q -r requirements.txt ||
      die "pip could not install requirements.txt into $venv"
    printf '%s\n' "$want" >"$stamp"
  fi
else
  for module in torch numpy pytest; do
    py_ok "$python" "import $module" || warn "$python cannot import $module (pip install $module)"
  done
fi

# --- Configure ------------------------------------------------------------------
cache="$build/CMakeCache.txt"
cached() { sed -n "s/^$1:[A-Z]*=//p" "$cache" 2>/dev/null; }

configure=(cmake -S "$root" -B "$build" -G Ninja -DKILN_PYTHON="$python")
if [[ ! -f "$cache" ]]; then
  configure_reason="first configure"
elif [[ "$(cached CMAKE_GENERATOR)" != Ninja ]]; then
  configure_reason="build/ was configured with another generator"
  configure+=(--fresh)
elif [[ "$(cached KILN_PYTHON)" != "$python" ]]; then
  configure_reason="python changed to $python"
  configure+=(--fresh)
elif [[ ! -f "$build/build.ninja" ]]; then
  configure_reason="the last configure did not finish"
else
  configure_reason=""  # the build step re-runs CMake itself when inputs change
fi

if [[ -n "$configure_reason" ]]; then
  [[ -x "$python" ]] || die "$python does not exist (pick a python with --python PATH)"
  "$python" -c 'import sys; sys.exit(sys.version_info[:2] not in ((3, 11), (3, 12)))' ||
    die "$python is $("$python" -c 'import sys; print(sys.version.split()[0])'); kiln needs CPython 3.11 or 3.12"
  "$python" -c 'import torch' >/dev/null 2>&1 ||
    die "$python cannot import torch (pip install torch, or run ./setup.sh without --python to use .venv)"
  say "configuring build/ ($configure_reason)"
  configure_log="$(mktemp)"
  "${configure[@]}" >"$configure_log" 2>&1 || {
    cat "$configure_log" >&2
    rm -f "$configure_log"
    die "CMake configure failed (output above)"
  }
  grep '^-- kiln:' "$configure_log" || true
  rm -f "$configure_log"
fi

# --- Build ----------------------------------------------------------------------
say "building with $jobs jobs"
cmake --build "$build" -j "$jobs" || die "build failed (compiler output above)"

# --- Make kiln reachable --------------------------------------------------------
# A .pth file rather than a copy, so edits to python/kiln take effect at once.
site_dir="$("$python" - <<'EOF'
import os, site, sys

def writable(d):
    while not os.path.exists(d):
        d = os.path.dirname(d)
    return os.access(d, os.W_OK)

site_dirs = site.getsitepackages()
candidates = []
if sys.prefix != sys.base_prefix:
    # A venv's own directory, not the system ones it may also see.
    candidates += [d for d in site_dirs if d.startswith(sys.prefix + os.sep)]
# Debian's python: /usr/local/lib is the admin's; /usr/lib belongs to dpkg.
candidates += [d for d in site_dirs if d.startswith("/usr/local/lib/")]
if site.ENABLE_USER_SITE:
    candidates.append(site.getusersitepackages())
candidates += site_dirs
print(next((d for d in candidates if writable(d)), ""))
EOF
)"
[[ -n "$site_dir" ]] || die "no writable site-packages directory for $python; use PYTHONPATH=$root/python"
pth="$site_dir/kiln.pth"
if [[ "$(cat "$pth" 2>/dev/null)" != "$root/python" ]]; then
  mkdir -p "$site_dir"
  printf '%s\n' "$root/python" >"$pth"
  say "wrote $pth"
fi

if [[ -w /usr/local/bin ]]; then
  link=/usr/local/bin/kiln
  if [[ -e "$link" && ! -L "$link" ]]; then
    warn "$link exists and is not a symlink; leaving it alone"
  elif [[ "$(readlink "$link" 2>/dev/null)" != "$build/bin/kiln" ]]; then
    ln -sfn "$build/bin/kiln" "$link"
    say "linked $link -> $build/bin/kiln"
  fi
fi

if ! import_error="$(cd / && "$python" -c 'import kiln' 2>&1)"; then
  printf '%s\n' "$import_error" >&2
  ((run_tests)) || die "kiln is built, but '$python -c \"import kiln\"' fails (traceback above)"
  warn "'import kiln' fails; running the tests anyway"
fi
say "ready: $python -c 'import kiln' and $build/bin/kiln"

# --- Optional runs --------------------------------------------------------------
status=0
if ((run_tests)); then
  trap - ERR
  say "running tests (ctest -V in build/)"
  # -V so that each runner's own summary shows even when everything passes.
  (cd "$build" && ctest -V) || status=$?
  if ((status == 0)); then say "tests passed"; else warn "tests failed (exit code $status)"; fi
fi
if ((run_example)); then
  trap - ERR
  say "running examples/compile_mlp.py"
  "$python" "$root/examples/compile_mlp.py" || { rc=$?; warn "example failed (exit code $rc)"; ((status)) || status=$rc; }
fi
exit "$status"
