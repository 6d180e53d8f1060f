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

# Pinned packages of the requirements file and the files it includes (-r), for the progress lines.
pins="$(cat "$requirements" $(sed -n 's/^-r //p' "$requirements") | grep -c '==' || true)"
HEARTBEAT_S="${KVTIER_HEARTBEAT_S:-8}"

# Run one step with a line before and after, and a line every HEARTBEAT_S seconds while it runs: the installers run
# quiet (their per-package lines would be hundreds), so without these a first set-up is a minute of silence.
step() {
  local what="$1" start rc beat
  shift
  start="$(date +%s)"
  echo "install-venv: $what ..."
  (while sleep "$HEARTBEAT_S"; do echo "install-venv:   still on ${what%%:*} ($(($(date +%s) - start)) s)"; done) &
  beat=$!
  rc=0
  "$@" || rc=$?
  kill "$beat" 2>/dev/null || true
  wait "$beat" 2>/dev/null || true
  [ "$rc" -eq 0 ] && echo "install-venv: ${what%%:*} done in $(($(date +%s) - start)) s"
  return "$rc"
}

with_uv() {
  step "step 1/3: uv (the installer) into $venv" \
    "$python" -m pip install --quiet --disable-pip-version-check "$uv_pin" || return 1
  local uv=("$venv/bin/uv" pip install --python "$python" --quiet)
  local what="step 2/3: $pins pinned packages of $requirements with uv (downloads what its cache lacks; seconds"
  what+=" with a warm cache)"
  step "$what" "${uv[@]}" -r "$requirements" &&
    step "step 3/3: ${*:+$* (without dependencies) and }kvtier itself (editable)" \
      uv_rest "$@"
}

uv_rest() {
  local uv=("$venv/bin/uv" pip install --python "$python" --quiet)
  { [ "$#" -eq 0 ] || "${uv[@]}" --no-deps "$@"; } && "${uv[@]}" --no-deps -e .
}

with_pip() {
  local pip=("$python" -m pip install --quiet --disable-pip-version-check --no-compile)
  step "step 1/2: $pins pinned packages of $requirements with pip (a few minutes)" "${pip[@]}" -r "$requirements" &&
    step "step 2/2: ${*:+$* (without dependencies) and }kvtier itself (editable)" pip_rest "$@"
}

pip_rest() {
  local pip=("$python" -m pip install --quiet --disable-pip-version-check --no-compile)
  { [ "$#" -eq 0 ] || "${pip[@]}" --no-deps "$@"; } && "${pip[@]}" --no-deps -e .
}

if [ "${KVTIER_INSTALLER:-uv}" = uv ] && with_uv "$@"; then
  exit 0
fi
[ "${KVTIER_INSTALLER:-uv}" = uv ] && echo "install-venv: uv could not install; using pip with the same pins" >&2
with_pip "$@"
