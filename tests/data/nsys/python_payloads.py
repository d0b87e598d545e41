#!/usr/bin/env python3
"""Prepares an Nsight Systems 2023.4 SQLite export of a Python-backtrace capture for cut.sh.

    python_payloads.py EXPORT.sqlite OUT.sqlite [EXPORT.json]

Always: the capture's environment block (the one StringIds value holding the profiled
process's environment, NUL-separated) is replaced by "(environment left out)".

With EXPORT.json (`nsys export --type json` of the same report): nsys 2023.4's SQLite export
drops the payloads of NVTX events, which its JSON export keeps (as base64). This writes each
mark's payload into the columns and tables that NVIDIA documents for later exports (schema
3.28.1): `NVTX_EVENTS.binaryData` (TEXT: the JSON export's base64, as it is) and the payload
schema tables `NVTX_PAYLOAD_SCHEMAS`, `NVTX_PAYLOAD_SCHEMA_ENTRIES`, `NVTX_PAYLOAD_ENUMS` and
`NVTX_PAYLOAD_ENUM_ENTRIES`, describing the `PythonBacktrace` schema. A JSON mark is matched to
its SQLite row by (timestamp, thread). Every payload byte is nsys's own; the schema rows are
built from the field names the 2023.4 injection library registers (`strings` of
libToolsInjectionPythonBacktrace64.so) and the offsets read off its payloads; only the
backtrace schema's id (4294967299) appears in the capture itself, the other ids are made up.
"""
import json
import shutil
import sqlite3
import sys

BACKTRACE_SCHEMA = 4294967299  # the SchemaId of every payload in the JSON export
FRAME_SCHEMA, SOURCE_ENUM = 4294967298, 4294967297


def main():
    src, out = sys.argv[1], sys.argv[2]
    shutil.copyfile(src, out)
    db = sqlite3.connect(out)
    env = [
        i
        for i, v in db.execute("SELECT id, value FROM StringIds")
        if "\0" in v and "PATH=" in v
    ]
    for i in env:
        db.execute("UPDATE StringIds SET value = '(environment left out)' WHERE id = ?", (i,))
    n = len(env)
    print(f"environment strings replaced: {n}")
    if len(sys.argv) > 3:
        add_payloads(db, sys.argv[3])
    db.commit()
    db.execute("VACUUM")
    db.close()


def add_payloads(db, json_path):
    payloads = {}
    with open(json_path) as f:
        for line in f:
            if '"BinaryData"' not in line:
                continue
            ev = json.loads(line).get("NvtxEvent")
            if not ev:
                continue
            [data] = ev["Payload"]["BinaryData"]
            assert int(data["SchemaId"]) == BACKTRACE_SCHEMA, data["SchemaId"]
            payloads[(int(ev["Timestamp"]), int(ev["GlobalTid"]))] = data["Data"]
    db.execute("ALTER TABLE NVTX_EVENTS ADD COLUMN binaryData TEXT")
    rows = db.execute(
        "SELECT rowid, start, globalTid FROM NVTX_EVENTS WHERE eventType = 34"
    ).fetchall()
    matched = 0
    for rowid, start, gtid in rows:
        p = payloads.get((start, gtid))
        if p is not None:
            db.execute("UPDATE NVTX_EVENTS SET binaryData = ? WHERE rowid = ?", (p, rowid))
            matched += 1
    print(f"marks: {len(rows)}, payloads in the JSON: {len(payloads)}, written: {matched}")
    assert matched == len(rows) == len(payloads)
    [(domain,)] = db.execute(
        "SELECT domainId FROM NVTX_EVENTS WHERE eventType = 75 AND text = 'Python Backtrace'"
    ).fetchall()
    db.executescript(
        """
        CREATE TABLE NVTX_PAYLOAD_SCHEMAS (domainId INTEGER, schemaId INTEGER, name TEXT,
            type INTEGER, flags INTEGER, numEntries INTEGER, payloadSize INTEGER,
            alignTo INTEGER);
        CREATE TABLE NVTX_PAYLOAD_SCHEMA_ENTRIES (domainId INTEGER, schemaId INTEGER,
            idx INTEGER, flags INTEGER, type INTEGER, name TEXT, description TEXT,
            arrayOrUnionDetail INTEGER, offset INTEGER);
        CREATE TABLE NVTX_PAYLOAD_ENUMS (domainId INTEGER, schemaId INTEGER, name TEXT,
            numEntries INTEGER, size INTEGER);
        CREATE TABLE NVTX_PAYLOAD_ENUM_ENTRIES (domainId INTEGER, schemaId INTEGER,
            idx INTEGER, name TEXT, value INTEGER, isFlag INTEGER);
        """
    )
    # The thread-state enum (Running, Blocking Wait, Uninterruptible) is left out: its values are
    # not known (the backtraces say 1; the samples 1 or 3, of the same kinds of code). The source's are: 1 in the periodic samples of
    # --python-sampling, 2 in the backtraces taken in CUDA calls.
    # A frame: function and file as string ids, then the line; a backtrace: its thread's state,
    # its source, the number of frames, then the frames (innermost first).
    db.executemany(
        "INSERT INTO NVTX_PAYLOAD_SCHEMAS VALUES (?, ?, ?, 1, 0, ?, ?, 8)",
        [(domain, FRAME_SCHEMA, "PythonFrame", 3, 24),
         (domain, BACKTRACE_SCHEMA, "PythonBacktrace", 4, 0)],
    )
    db.executemany(
        "INSERT INTO NVTX_PAYLOAD_SCHEMA_ENTRIES VALUES (?, ?, ?, 0, NULL, ?, NULL, NULL, ?)",
        [(domain, FRAME_SCHEMA, 0, "Function", 0),
         (domain, FRAME_SCHEMA, 1, "File", 8),
         (domain, FRAME_SCHEMA, 2, "Line", 16),
         (domain, BACKTRACE_SCHEMA, 0, "Thread state", 0),
         (domain, BACKTRACE_SCHEMA, 1, "Source", 4),
         (domain, BACKTRACE_SCHEMA, 2, "Frames count", 8),
         (domain, BACKTRACE_SCHEMA, 3, "Frames", 16)],
    )
    db.executemany(
        "INSERT INTO NVTX_PAYLOAD_ENUMS VALUES (?, ?, ?, ?, 4)",
        [(domain, SOURCE_ENUM, "Source", 2)],
    )
    db.executemany(
        "INSERT INTO NVTX_PAYLOAD_ENUM_ENTRIES VALUES (?, ?, ?, ?, ?, 0)",
        [(domain, SOURCE_ENUM, 0, "Periodic sampling", 1),
         (domain, SOURCE_ENUM, 1, "Event based", 2)],
    )


if __name__ == "__main__":
    main()
