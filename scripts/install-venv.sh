#!/usr/bin/env bash
# Install kvtier's pinned packages into a venv: with uv where it runs (its cache makes a fresh set-up take seconds),
# else with pip and the same pins. Nothing is compiled here: compiling every installed module was most of a fresh
# set-up (50 of 67 s); scripts/compile-optimized.py compiles what a synth and the command load, and all of it for
# the tests (the Makefile's .optimized and .compiled steps). Usage: scripts/install-venv.sh VENV REQUIREMENTS PKG...
# The packages after REQUIREMENTS are installed without their dependencies (their needs are pinned in REQUIREMENTS).
set -euo pipefail
venv="$1" requirements="$2"
shift 2
python="$venv/bin/python"
uv_pin="$(grep -E '^uv==' requirements-dev.txt | cut -d' ' -f1)"
export UV_NO_PROGRESS=1

with_uv() {
  "$python" -m pip install --quiet --disable-pip-version-check "$uv_pin" || return 1
  local uv=("$venv/bin/uv" pip install --python "$python" --quiet)
  "${uv[@]}" -r "$requirements" &&
    { [ "$#" -eq 0 ] || "${uv[@]}" --no-deps "$@"; } &&
    "${uv[@]}" --no-deps -e .
}

with_pip() {
  local pip=("$python" -m pip install --quiet --disable-pip-version-check --no-compile)
  "${pip[@]}" -r "$requirements" &&
    { [ "$#" -eq 0 ] || "${pip[@]}" --no-deps "$@"; } &&
    "${pip[@]}" --no-deps -e .
}

if [ "${KVTIER_INSTALLER:-uv}" = uv ] && with_uv "$@"; then
  exit 0
fi
[ "${KVTIER_INSTALLER:-uv}" = uv ] && echo "install-venv: uv could not install; using pip with the same pins" >&2
with_pip "$@"
