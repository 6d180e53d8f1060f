#!/usr/bin/env bash
# kvtier: init step of a Curvine master. Decides whether the master may start on its metadata and journal dirs.
#
#   master-init.sh META_DIR JOURNAL_DIR CONF_FILE
#
# Curvine v0.4.1 starts with format_master=false on (a) two RocksDB stores or (b) two missing/empty dirs, which it
# bootstraps; anything else makes it refuse to start (CurvineIO/curvine@v0.4.1
# curvine-master/src/master/journal/journal_system.rs; docs/references.md "The L2 pool").
# This script never deletes anything:
#   - both dirs hold RocksDB data      -> start on them ("start"), and remember that this volume was initialized;
#   - both dirs empty, never started   -> create them; Curvine formats them on first start ("bootstrap");
#   - both dirs empty after a start    -> refuse: the data is gone (wrong or replaced volume); a Raft member must not
#                                         rejoin with an empty log;
#   - any other mix                    -> refuse, with what was found.
# It also refuses a config that would format (format_master/format_worker absent or true): a restart never formats.
# Exit: 0 start or bootstrap, 1 refused (data kept), 2 usage or unsafe config.
set -euo pipefail
shopt -s nullglob dotglob

MARKER=.kvtier-initialized  # next to each dir, on the volume root

say() { echo "kvtier master-init: $*"; }

if [ "$#" -ne 3 ]; then
  say "usage: master-init.sh META_DIR JOURNAL_DIR CONF_FILE" >&2
  exit 2
fi
meta=$1 journal=$2 conf=$3

# Curvine defaults format_master/format_worker to true when absent: demand an explicit false for both.
for key in format_master format_worker; do
  if ! grep -Eq "^[[:space:]]*${key}[[:space:]]*=[[:space:]]*false[[:space:]]*(#.*)?$" "$conf" \
    || grep -Eq "^[[:space:]]*${key}[[:space:]]*=[[:space:]]*true" "$conf"; then
    say "refusing to start: $conf must set '$key = false' (absent or true wipes data at every start)" >&2
    exit 2
  fi
done

# rocksdb: Curvine's own test (data/CURRENT and a data/MANIFEST-*); empty: missing, or nothing but an empty data/.
state() {
  local dir=$1
  local manifests=("$dir"/data/MANIFEST-*)
  if [ -f "$dir/data/CURRENT" ] && [ "${#manifests[@]}" -gt 0 ]; then
    echo rocksdb
    return
  fi
  if [ ! -e "$dir" ]; then
    echo empty
    return
  fi
  if [ ! -d "$dir" ]; then
    echo invalid
    return
  fi
  local entries=("$dir"/*)
  if [ "${#entries[@]}" -eq 0 ]; then
    echo empty
  elif [ "${#entries[@]}" -eq 1 ] && [ -d "$dir/data" ] && [ -z "$(ls -A "$dir/data")" ]; then
    echo empty
  else
    echo invalid
  fi
}

marker_of() { echo "$(dirname "$1")/$MARKER"; }

meta_state=$(state "$meta")
journal_state=$(state "$journal")
say "meta $meta: $meta_state; journal $journal: $journal_state"

if [ "$meta_state" = rocksdb ] && [ "$journal_state" = rocksdb ]; then
  for dir in "$meta" "$journal"; do
    [ -e "$(marker_of "$dir")" ] || date -u +%Y-%m-%dT%H:%M:%SZ > "$(marker_of "$dir")"
  done
  say "start: existing metadata and journal are kept (format_master = false)"
  exit 0
fi

if [ "$meta_state" = empty ] && [ "$journal_state" = empty ]; then
  for dir in "$meta" "$journal"; do
    if [ -e "$(marker_of "$dir")" ]; then
      say "refusing to start: $dir is empty but $(marker_of "$dir") shows this volume held Curvine data before." >&2
      say "The volume was replaced or wiped. If that is intended, delete the marker; with several masters, also" >&2
      say "remove this member from the Raft group first. Nothing was changed." >&2
      exit 1
    fi
  done
  mkdir -p "$meta" "$journal"
  say "bootstrap: empty metadata and journal; Curvine formats them on this first start"
  exit 0
fi

say "refusing to start: meta is '$meta_state' and journal is '$journal_state'; Curvine needs both RocksDB or both empty." >&2
say "Nothing was changed. Inspect the volumes (kubectl -n curvine debug), then empty both dirs to start afresh." >&2
exit 1
