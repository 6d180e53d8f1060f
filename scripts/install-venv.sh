#!/usr/bin/env bash
# Install kvtier's pinned packages into a venv: with uv where it runs (its cache makes a fresh set-up take seconds
# and --compile-bytecode writes every .pyc once, which synth needs where PYTHONDONTWRITEBYTECODE is set), else with
# pip and the same pins. Usage: scripts/install-venv.sh VENV REQUIREMENTS NO_DEPS_PACKAGE...
# The packages after REQUIREMENTS are installed without their dependencies (their needs are pinned in REQUIREMENTS).
set -euo pipefail
venv="$1" requirements="$2"
shift 2
python="$venv/bin/python"
uv_pin="$(grep -E '^uv==' requirements-dev.txt | cut -d' ' -f1)"
# Huge generated modules (aws_cdk.aws_quicksight) need more than uv's 60 s default to compile on a busy 2-core machine.
export UV_COMPILE_BYTECODE_TIMEOUT="${UV_COMPILE_BYTECODE_TIMEOUT:-600}" UV_NO_PROGRESS=1

with_uv() {
  "$python" -m pip install --quiet --disable-pip-version-check "$uv_pin" || return 1
  local uv=("$venv/bin/uv" pip install --python "$python" --compile-bytecode --quiet)
  "${uv[@]}" -r "$requirements" &&
    { [ "$#" -eq 0 ] || "${uv[@]}" --no-deps "$@"; } &&
    "${uv[@]}" --no-deps -e .
}

with_pip() {
  local pip=("$python" -m pip install --quiet --disable-pip-version-check)
  "${pip[@]}" -r "$requirements" &&
    { [ "$#" -eq 0 ] || "${pip[@]}" --no-deps "$@"; } &&
    "${pip[@]}" --no-deps -e .
}

if [ "${KVTIER_INSTALLER:-uv}" = uv ] && with_uv "$@"; then
  exit 0
fi
[ "${KVTIER_INSTALLER:-uv}" = uv ] && echo "install-venv: uv could not install; using pip with the same pins" >&2
with_pip "$@"
