#!/bin/sh
# Cuts an Nsight Systems SQLite export down to what gaptop reads, and gzips it:
#   cut.sh SOURCE.sqlite OUT.sqlite.gz
# Kept whole: every table gaptop reads (see core/src/sources/nsys/) and the enums they refer to.
# Left out: OS scheduling, CPU sampling, OS runtime and diagnostics tables, the capture's
# environment variables and host facts (META_DATA_CAPTURE, TARGET_INFO_SYSTEM_ENV,
# ProcessStreams), and the processes that made no CUDA call. No row of a kept table is changed.
set -eu
src=$1
out=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
keep="StringIds META_DATA_EXPORT EXPORT_META_DATA TARGET_INFO_SESSION_START_TIME ThreadNames
TARGET_INFO_GPU MPI_RANKS CUPTI_ACTIVITY_KIND_RUNTIME CUPTI_ACTIVITY_KIND_DRIVER
CUPTI_ACTIVITY_KIND_KERNEL CUPTI_ACTIVITY_KIND_MEMCPY CUPTI_ACTIVITY_KIND_MEMSET
CUPTI_ACTIVITY_KIND_SYNCHRONIZATION CUPTI_ACTIVITY_KIND_GRAPH_TRACE CUDA_GRAPH_EVENTS
CUDA_GRAPH_NODE_EVENTS CUDA_CALLCHAINS NVTX_EVENTS NVTX_PAYLOAD_SCHEMAS NVTX_PAYLOAD_SCHEMA_ENTRIES
NVTX_PAYLOAD_ENUMS NVTX_PAYLOAD_ENUM_ENTRIES ENUM_NSYS_EVENT_TYPE ENUM_NSYS_EVENT_CLASS
ENUM_CUDA_MEMCPY_OPER"
{
  echo "ATTACH DATABASE '$src' AS src;"
  for t in $keep; do
    if [ -n "$(sqlite3 "$src" "SELECT name FROM sqlite_master WHERE type='table' AND name='$t'")" ]; then
      # The table's own CREATE statement (with NVIDIA's column comments), then its rows.
      sqlite3 "$src" "SELECT sql || ';' FROM sqlite_master WHERE type='table' AND name='$t'"
      echo "INSERT INTO main.$t SELECT * FROM src.$t;"
    fi
  done
  # Only the processes whose threads made CUDA calls.
  sqlite3 "$src" "SELECT sql || ';' FROM sqlite_master WHERE type='table' AND name='PROCESSES'"
  echo "INSERT INTO main.PROCESSES SELECT * FROM src.PROCESSES WHERE pid IN
    (SELECT DISTINCT (globalTid >> 24) & 16777215 FROM src.CUPTI_ACTIVITY_KIND_RUNTIME);"
  echo "DETACH DATABASE src;"
} > "$tmp/cut.sql"
sqlite3 "$tmp/cut.sqlite" < "$tmp/cut.sql"
sqlite3 "$tmp/cut.sqlite" "VACUUM;"
gzip -9 -n -c "$tmp/cut.sqlite" > "$out"
