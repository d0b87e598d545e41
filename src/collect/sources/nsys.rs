//! Import of Nsight Systems captures: the SQLite export (`nsys export --type sqlite`, plain or
//! gzipped) and, through the `nsys` on PATH, a `.nsys-rep` report.
//!
//! What is read, by table (NVIDIA's schema; a report holds only the tables it has rows for):
//!
//! - `CUPTI_ACTIVITY_KIND_KERNEL`, `_MEMCPY`, `_MEMSET`: GPU ops, one lane per (process,
//!   device, stream); names through `StringIds`. A kernel with a `graphNodeId` ran as a node of
//!   a CUDA graph; `CUPTI_ACTIVITY_KIND_GRAPH_TRACE` (graphs traced whole) gives one op per
//!   replay. Either way an op's graph is the graph launch it came from (its correlation id), so
//!   that the gaps inside one replay read as the graph's.
//! - `CUPTI_ACTIVITY_KIND_RUNTIME` (runtime and, in recent exports, driver calls by their
//!   `eventClass`) and `CUPTI_ACTIVITY_KIND_DRIVER` (older exports): API calls, joined to the
//!   ops on (process, correlation id). A row of class `CUDABACKTRACE` (older exports) only
//!   carries the call chain of the call with its correlation id.
//! - `CUDA_CALLCHAINS` (`--cudabacktrace`): a call's chain becomes its stack, outermost first,
//!   under the NVTX ranges open at the call; the profiler's and the driver's own frames next to
//!   the call are left out. Frames read `symbol [module]`, or `module+0xADDRESS` unresolved.
//! - `CUDA_GRAPH_NODE_EVENTS` (`--cuda-graph-trace=node`): where and when each graph node was
//!   made, and the node an instantiated graph's node was cloned from. A replayed node whose
//!   original was made inside a call of the export (the launch that stream capture recorded,
//!   or a `cudaGraphAdd*Node`) gets a call of its own: its replay's `cudaGraphLaunch` with
//!   the launch's stack, then [`CAPTURED_AT`] and that call's stack, so that a graph's gaps
//!   name the code its nodes came from.
//! - `NVTX_EVENTS`: push/pop and start/end ranges become CPU spans of the thread that opened
//!   them, so they are frames above the launches they enclose (as Kineto's `user_annotation`
//!   spans are), and the processes' NVTX ranges (with their domains, named by the domain
//!   creation events) for the timeline's lane and steps.
//! - `COMPOSITE_EVENTS` and `SAMPLING_CALLCHAINS` (`--sample=process-tree`): CPU samples of
//!   the processes that did CUDA work, with their user-mode stacks, as the threads' samples
//!   (what the CPU did during gaps), the period the median interval between a thread's samples.
//! - Python backtraces: NVTX marks of nsys's `Python Backtrace` domain whose payload
//!   (`NVTX_EVENTS.binaryData`: a blob, or text as base64 or hex) holds a `PythonBacktrace`
//!   (see [`pybacktrace`]), laid out as `NVTX_PAYLOAD_SCHEMAS` and `_SCHEMA_ENTRIES` say where
//!   the export has them. One taken in a CUDA call (`--python-backtrace=cuda`; nsys takes it
//!   as it enters the call: where its backtrace row starts, or just before CUPTI's start of
//!   the call) gives that call and the calls made inside it
//!   their Python frames, in place of the interpreter's frames of the call chain (the native
//!   frames below the interpreter stay). Periodic ones (`--python-sampling`) are CPU samples;
//!   nsys takes them on its own thread, so a process's samples go to its one thread that made
//!   CUDA calls, where there is one. nsys 2023.4 and older export the marks without their
//!   payloads: a note says so.
//! - `PROCESSES` and `MPI_RANKS`: process names and ranks; `META_DATA_EXPORT` (or the older
//!   `EXPORT_META_DATA`): the Nsight Systems version and the export's schema version.
//!
//! `globalTid` and `globalPid` are serialized ids: the process is `(id >> 24) & 0xFFFFFF`, the
//! thread `id & 0xFFFFFF`, and the bits above 48 name the machine, so a process is its id with
//! the thread's bits cleared. Times are nanoseconds on the capture's clock.
//!
//! The report's notes (`Store::notes`) say the version read and every table it lacked with what
//! that costs; anything unreadable is an error that names the table and the column.

use crate::collect::model::dropped;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{anyhow, bail};
use rusqlite::{types::ValueRef, Connection, OpenFlags, Row};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use super::pybacktrace;
use crate::collect::model::plausible::{self, Bulk, Verdict, What};
use crate::collect::model::records::{
    ApiCall, ApiKind, CpuSample, GpuOp, LaneKey, NameId, Ns, OpKind, Span, StackId, FLAG_COMM,
    MAX_TS,
};
use crate::collect::model::store::Store;
use crate::frames::is_comm_kernel;

/// The first bytes of every SQLite database.
pub const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";
/// The first bytes of an Nsight Systems report (`.nsys-rep`).
pub const REPORT_MAGIC: &[u8] = b"NVIDIA Tegra Profiler Report";

/// The forms of an Nsight Systems capture gaptop reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Sqlite,
    GzSqlite,
    Report,
}

/// Which Nsight Systems form `path` is, from `head`, its first bytes (at least 28 of them when
/// the file has that many); `None` when it is none of them.
pub fn sniff(path: &Path, head: &[u8]) -> Option<Kind> {
    if head.starts_with(SQLITE_MAGIC) {
        return Some(Kind::Sqlite);
    }
    if head.starts_with(REPORT_MAGIC) {
        return Some(Kind::Report);
    }
    if head.starts_with(&[0x1f, 0x8b]) {
        let mut inner = [0u8; 16];
        let ok = std::fs::File::open(path)
            .map(|f| {
                flate2::read::GzDecoder::new(f)
                    .read_exact(&mut inner)
                    .is_ok()
            })
            .unwrap_or(false);
        if ok && &inner == SQLITE_MAGIC {
            return Some(Kind::GzSqlite);
        }
    }
    None
}

/// Loads a file of the form `kind` into a new store. Errors are one line (the caller names the
/// file).
pub fn load_kind(path: &Path, kind: Kind, budget: usize) -> anyhow::Result<Store> {
    let source = path
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    match kind {
        Kind::Sqlite => load_sqlite(path, &source, budget),
        Kind::GzSqlite => {
            // Removed however this ends (signals too; a kill, by the next gaptop).
            let dir = crate::files::TempFolder::new("sqlite")?;
            let plain = dir.path().join("export.sqlite");
            super::inflate::to_file(path, &plain)?;
            load_sqlite(&plain, &source, budget)
        }
        Kind::Report => {
            let dir = crate::files::TempFolder::new("nsys-export")?;
            let plain = export_report(path, dir.path())?;
            load_sqlite(&plain, &source, budget)
        }
    }
}

/// Runs `nsys export --type sqlite` on a report, into `dir`; the export's path.
fn export_report(path: &Path, dir: &Path) -> anyhow::Result<std::path::PathBuf> {
    let out = dir.join("export.sqlite");
    let run = Command::new("nsys")
        .args(["export", "--type", "sqlite", "--output"])
        .arg(&out)
        .arg(path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output();
    let run = match run {
        Ok(r) => r,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "an Nsight Systems report, and no `nsys` is on PATH to export it: run \
             `nsys export --type sqlite {}` and open the .sqlite it writes",
            path.display()
        ),
        Err(e) => bail!("cannot run `nsys export`: {e}"),
    };
    if !run.status.success() || !out.is_file() {
        let err = String::from_utf8_lossy(&run.stderr);
        let last = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        bail!(
            "`nsys export --type sqlite` failed ({}){}{}",
            run.status,
            if last.is_empty() { "" } else { ": " },
            last.trim()
        );
    }
    Ok(out)
}

/// The export's tables and their columns, as the database says.
struct Db {
    conn: Connection,
    tables: HashSet<String>,
}

impl Db {
    fn open(path: &Path) -> anyhow::Result<Db> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| anyhow!("not a readable SQLite database: {e}"))?;
        let mut st = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
            .map_err(|e| anyhow!("not a readable SQLite database: {e}"))?;
        let tables = st
            .query_map([], |r| r.get::<_, String>(0))
            .and_then(|rows| rows.collect::<Result<HashSet<_>, _>>())
            .map_err(|e| anyhow!("not a readable SQLite database: {e}"))?;
        drop(st);
        Ok(Db { conn, tables })
    }

    fn has(&self, table: &str) -> bool {
        self.tables.contains(table)
    }

    fn columns(&self, table: &str) -> anyhow::Result<HashSet<String>> {
        let mut st = self
            .conn
            .prepare(&format!("PRAGMA table_info(\"{table}\")"))
            .map_err(|e| anyhow!("{table}: {e}"))?;
        let cols = st
            .query_map([], |r| r.get::<_, String>(1))
            .and_then(|rows| rows.collect::<Result<HashSet<_>, _>>())
            .map_err(|e| anyhow!("{table}: {e}"))?;
        Ok(cols)
    }

    /// Calls `f` on every row of `table` with `cols` in that order: a column named `name!` must
    /// be there (an error names it when it is not); one the table lacks reads as NULL.
    fn each(
        &self,
        table: &str,
        cols: &[&str],
        f: impl FnMut(&Row) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        self.each_where(table, cols, None, f)
    }

    /// [`Db::each`] on the rows that SQL condition `filter` (on columns the table has) holds for.
    fn each_where(
        &self,
        table: &str,
        cols: &[&str],
        filter: Option<&str>,
        mut f: impl FnMut(&Row) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let have = self.columns(table)?;
        let mut sel = Vec::with_capacity(cols.len());
        for c in cols {
            let (name, required) = match c.strip_suffix('!') {
                Some(n) => (n, true),
                None => (*c, false),
            };
            if have.contains(name) {
                sel.push(format!("\"{name}\""));
            } else if required {
                bail!("{table} has no column {name}");
            } else {
                sel.push("NULL".to_string());
            }
        }
        let mut sql = format!("SELECT {} FROM \"{table}\"", sel.join(", "));
        if let Some(w) = filter {
            sql.push_str(" WHERE ");
            sql.push_str(w);
        }
        let mut st = self
            .conn
            .prepare(&sql)
            .map_err(|e| anyhow!("{table}: {e}"))?;
        let mut rows = st.query([]).map_err(|e| anyhow!("{table}: {e}"))?;
        while let Some(r) = rows.next().map_err(|e| anyhow!("{table}: {e}"))? {
            f(r).map_err(|e| anyhow!("{table}: {e:#}"))?;
        }
        Ok(())
    }

    /// Every row of `table` with the integer columns `cols` (as [`Db::each`] names them).
    fn ints<const N: usize>(
        &self,
        table: &str,
        cols: &[&str; N],
    ) -> anyhow::Result<Vec<[Option<i64>; N]>> {
        let mut rows = Vec::new();
        self.each(table, cols, |r| {
            let mut v = [None; N];
            for (i, c) in cols.iter().enumerate() {
                v[i] = int(r, i, c.trim_end_matches('!'))?;
            }
            rows.push(v);
            Ok(())
        })?;
        Ok(rows)
    }
}

/// Column `i` of a row as an integer, or `None` for NULL; anything else is an error naming the
/// column.
fn int(r: &Row, i: usize, name: &str) -> anyhow::Result<Option<i64>> {
    r.get::<_, Option<i64>>(i)
        .map_err(|e| anyhow!("column {name}: {e}"))
}

fn text(r: &Row, i: usize, name: &str) -> anyhow::Result<Option<String>> {
    r.get::<_, Option<String>>(i)
        .map_err(|e| anyhow!("column {name}: {e}"))
}

/// `StringIds`, sorted by id, with the store's name of each string once it is asked for.
struct Strings {
    ids: Vec<i64>,
    values: Vec<Box<str>>,
    interned: Vec<NameId>,
}

const NOT_INTERNED: NameId = NameId::MAX;

impl Strings {
    fn load(db: &Db) -> anyhow::Result<Strings> {
        let mut rows: Vec<(i64, Box<str>)> = Vec::new();
        db.each("StringIds", &["id!", "value!"], |r| {
            let id = int(r, 0, "id")?.ok_or_else(|| anyhow!("an id is NULL"))?;
            let v = text(r, 1, "value")?.unwrap_or_default();
            rows.push((id, v.into_boxed_str()));
            Ok(())
        })?;
        rows.sort_unstable_by_key(|x| x.0);
        let n = rows.len();
        let (ids, values) = rows.into_iter().unzip();
        Ok(Strings {
            ids,
            values,
            interned: vec![NOT_INTERNED; n],
        })
    }

    fn get(&self, id: i64) -> Option<&str> {
        self.ids.binary_search(&id).ok().map(|i| &*self.values[i])
    }

    /// The store's name of string `id` (0, the empty name, for an unknown id).
    fn name(&mut self, store: &mut Store, id: Option<i64>) -> NameId {
        let Some(i) = id.and_then(|id| self.ids.binary_search(&id).ok()) else {
            return 0;
        };
        if self.interned[i] == NOT_INTERNED {
            self.interned[i] = store.names.intern(&self.values[i]);
        }
        self.interned[i]
    }
}

/// `ENUM_NSYS_EVENT_TYPE` values of NVTX ranges and marks (the other NVTX events, a domain's
/// creation or a thread's name, are passed over).
const NVTX_PUSH_POP: i64 = 59;
const NVTX_START_END: i64 = 60;
const NVTX_MARK: i64 = 34;
/// `NvtxDomainCreate`: names the domain of its `domainId`.
const NVTX_DOMAIN_CREATE: i64 = 75;
/// `ENUM_NSYS_EVENT_CLASS` values of CUDA backtrace rows (older exports: a second row for a
/// call, carrying its chain).
const CLASS_BACKTRACE: [i64; 3] = [67, 68, 69];

/// The tables gaptop reads, and what a report without each lacks.
const EXPECTED: [(&str, &str); 7] = [
    ("CUPTI_ACTIVITY_KIND_KERNEL", "no kernels"),
    ("CUPTI_ACTIVITY_KIND_MEMCPY", "no memory copies"),
    ("CUPTI_ACTIVITY_KIND_MEMSET", "no memsets"),
    (
        "CUPTI_ACTIVITY_KIND_RUNTIME",
        "no CUDA API calls: gaps have no launch call, stack or sync (capture with --trace=cuda)",
    ),
    (
        "CUDA_CALLCHAINS",
        "launches have no native stacks (capture with --cudabacktrace=all)",
    ),
    (
        "NVTX_EVENTS",
        "no NVTX ranges in the call tree or as steps (capture with --trace=nvtx)",
    ),
    (
        "COMPOSITE_EVENTS",
        "gaps do not say what the CPU did (capture with --sample=process-tree)",
    ),
];

/// The process of a serialized id: the id with the thread's bits cleared.
fn proc_key(gid: i64) -> i64 {
    gid & !0xFF_FFFF
}

fn pid_of(gid: i64) -> u32 {
    ((gid >> 24) & 0xFF_FFFF) as u32
}

fn tid_of(gid: i64) -> u32 {
    (gid & 0xFF_FFFF) as u32
}

fn corr_of(c: Option<i64>) -> u32 {
    c.unwrap_or(0).clamp(0, u32::MAX as i64) as u32
}

/// An API call read, before its stack is known.
struct RawCall {
    proc: u32,
    call: ApiCall,
    chain: Option<i64>,
    /// The time the profiler spent in the call, its own work included: where older exports
    /// give the chain in a second row, that row's start and end (they hold the call's).
    held: (Ns, Ns),
}

/// A frame of `CUDA_CALLCHAINS`: its symbol's and module's strings.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct FrameKey {
    symbol: Option<i64>,
    module: Option<i64>,
    unresolved: bool,
}

/// A call chain's frames, outermost first, and where the frames below the Python interpreter's
/// innermost one start (0 when it has none): where a Python backtrace's frames go instead.
struct Chain {
    frames: Vec<NameId>,
    below_interpreter: usize,
}

/// Whose code a native frame is, by its module.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Origin {
    Program,
    /// The CUDA libraries' or the profiler's, next to a CUDA call.
    Tool,
    /// The Python interpreter's (`python3.12`, `libpython3.12.so`).
    Interpreter,
}

impl Origin {
    fn of(base: &str) -> Origin {
        if is_tool_module(base) {
            Origin::Tool
        } else if base.starts_with("python") || base.starts_with("libpython") {
            Origin::Interpreter
        } else {
            Origin::Program
        }
    }
}

struct ChainRow {
    id: i64,
    depth: i64,
    frame: FrameKey,
}

/// A Python backtrace read: the thread and time it was taken at, whether by periodic sampling
/// (else inside a CUDA call), and its frames, outermost first.
struct PyTrace {
    gtid: i64,
    time: Ns,
    sampled: bool,
    frames: Vec<NameId>,
}

/// NVTX ranges read, by (process, thread).
type ThreadRanges = HashMap<(u32, u32), Vec<RawRange>>;

/// An NVTX range read.
struct RawRange {
    start: Ns,
    end: Ns,
    name: NameId,
    /// Its domain's name (0: the default domain).
    domain: NameId,
}

struct Import {
    db: Db,
    store: Store,
    strings: Strings,
    procs: HashMap<i64, u32>,
    names: HashMap<i64, String>,
    ranks: HashMap<i64, i32>,
    /// Each CUDA graph node's original (the node captured or added by the program, that an
    /// instantiated graph's node was cloned from): where and when it was made, by (process
    /// key, node id).
    node_origin: HashMap<(i64, i64), (i64, Ns)>,
    /// Ops replayed from a graph whose original node's making is known, each given a
    /// correlation id of its own for a call that says where the node was captured.
    replayed: Vec<Replayed>,
    /// Where the bulk of the export's times lie, once its ops and calls are read
    /// (`collect::model::plausible`).
    bulk: Option<Bulk>,
}

/// A graph node's op given a call of its own: its process, the `cudaGraphLaunch` that replayed
/// it, the correlation id of its own, and the thread and time its original node was made at.
struct Replayed {
    proc: u32,
    launch: u32,
    corr: u32,
    made: (i64, Ns),
}

/// Correlation ids from here up are gaptop's own (CUPTI's count up from 1 in a process).
const OWN_CORR: u32 = 0xC000_0000;

/// The frame between a replayed node's launch stack and the stack it was captured at.
pub const CAPTURED_AT: &str = "(graph node captured at)";

impl Import {
    /// The store's process of serialized id `gid`, made on first use.
    fn proc(&mut self, gid: i64) -> u32 {
        let key = proc_key(gid);
        if let Some(&p) = self.procs.get(&key) {
            return p;
        }
        let label = self
            .names
            .get(&key)
            .cloned()
            .unwrap_or_else(|| self.store.source.clone());
        let rank = self.ranks.get(&key).copied().unwrap_or(-1);
        let p = self.store.add_process(pid_of(gid), rank, &label);
        self.procs.insert(key, p);
        p
    }

    fn note(&mut self, s: String) {
        self.store.notes.push(s);
    }

    /// What `collect::model::plausible`'s rule says of a record: by its shape alone until the
    /// export's bulk is known.
    fn verdict(&self, what: What, start: Ns, end: Ns) -> Option<Verdict> {
        match &self.bulk {
            Some(b) => b.judge(what, start, end),
            None => plausible::shape(what, start, end),
        }
    }

    /// Finds the bulk of the export's times from its ops and `calls`, and drops the ops and
    /// calls it makes implausible.
    fn judge_times(&mut self, calls: &mut Vec<RawCall>) {
        let procs = 0..self.store.procs.len() as u32;
        let starts = calls.iter().map(|c| c.call.start);
        self.bulk = dropped::file_bulk(&self.store, &procs, starts, calls.len());
        let Some(bulk) = self.bulk else {
            return;
        };
        dropped::drop_ops_and_calls(&mut self.store, &procs, &bulk);
        dropped::retain(&mut self.store, calls, What::ApiCall, &bulk, |c| {
            (c.call.start, c.call.end, c.call.name)
        });
    }

    fn version(&mut self) -> anyhow::Result<()> {
        let table = ["META_DATA_EXPORT", "EXPORT_META_DATA"]
            .into_iter()
            .find(|t| self.db.has(t));
        let Some(table) = table else {
            self.note("no META_DATA_EXPORT: the export's schema version is unknown".into());
            return Ok(());
        };
        let (mut product, mut schema) = (None, None);
        self.db.each(table, &["name!", "value"], |r| {
            let name = text(r, 0, "name")?.unwrap_or_default();
            let value = text(r, 1, "value")?;
            match name.as_str() {
                "EXPORT_PRODUCT_VERSION" => product = value,
                "EXPORT_SCHEMA_VERSION" => schema = value,
                _ => {}
            }
            Ok(())
        })?;
        let schema = schema.unwrap_or_else(|| "unknown".into());
        let mut s = format!(
            "Nsight Systems {} export, schema {schema}",
            product.as_deref().unwrap_or("(version unknown)")
        );
        let major = schema.split('.').next().and_then(|m| m.parse::<u32>().ok());
        if !matches!(major, Some(2 | 3)) {
            s.push_str(" (gaptop knows schemas 2 and 3; read as 3)");
        }
        self.note(s);
        Ok(())
    }

    fn process_names(&mut self) -> anyhow::Result<()> {
        if self.db.has("PROCESSES") {
            let names = &mut self.names;
            self.db.each("PROCESSES", &["globalPid!", "name"], |r| {
                if let (Some(g), Some(n)) = (int(r, 0, "globalPid")?, text(r, 1, "name")?) {
                    names.insert(proc_key(g), n);
                }
                Ok(())
            })?;
        }
        if self.db.has("MPI_RANKS") {
            let ranks = &mut self.ranks;
            self.db.each("MPI_RANKS", &["globalTid!", "rank!"], |r| {
                if let (Some(g), Some(k)) = (int(r, 0, "globalTid")?, int(r, 1, "rank")?) {
                    ranks.insert(proc_key(g), k.clamp(-1, i32::MAX as i64) as i32);
                }
                Ok(())
            })?;
        }
        Ok(())
    }

    /// Adds one GPU op; `None` when its times cannot be right (counted as skipped).
    #[allow(clippy::too_many_arguments)]
    fn op(
        &mut self,
        gpid: Option<i64>,
        device: Option<i64>,
        stream: Option<i64>,
        start: Option<i64>,
        end: Option<i64>,
        kind: OpKind,
        name: NameId,
        corr: Option<i64>,
        graph: bool,
        as_corr: Option<u32>,
    ) {
        let (Some(start), Some(end)) = (start, end) else {
            self.store.skip("GPU op without a start or an end");
            return;
        };
        if let Some(v) = plausible::shape(What::GpuOp, start, end) {
            self.store.drop_implausible(What::GpuOp, v, name);
            return;
        }
        let proc = self.proc(gpid.unwrap_or(0));
        let lane = self.store.lane_id(LaneKey {
            proc,
            device: device.unwrap_or(0).clamp(0, u32::MAX as i64) as u32,
            stream: stream.unwrap_or(0).clamp(0, u32::MAX as i64) as u32,
        });
        let corr = corr_of(corr);
        let mut op = GpuOp::new(start, end, kind, name, as_corr.unwrap_or(corr));
        if graph {
            op.graph = corr.max(1);
        }
        if kind == OpKind::Kernel && is_comm_kernel(self.store.names.get(name)) {
            op.flags |= FLAG_COMM;
        }
        self.store.push_op_unsorted(lane, op);
    }

    /// Reads `CUDA_GRAPH_NODE_EVENTS` (`--cuda-graph-trace=node`): each node's making, and the
    /// original each instantiated node was cloned from, followed back to the node the program
    /// made (by stream capture or a `cudaGraphAdd*Node` call).
    fn graph_nodes(&mut self) -> anyhow::Result<()> {
        let t = "CUDA_GRAPH_NODE_EVENTS";
        if !self.db.has(t) {
            return Ok(());
        }
        let rows = self.db.ints(
            t,
            &["start!", "globalTid", "graphNodeId!", "originalGraphNodeId"],
        )?;
        let mut parent: HashMap<(i64, i64), i64> = HashMap::default();
        let mut made: HashMap<(i64, i64), (i64, Ns)> = HashMap::default();
        for [start, gtid, node, original] in rows {
            let (Some(start), Some(gtid), Some(node)) = (start, gtid, node) else {
                continue;
            };
            let key = (proc_key(gtid), node);
            match original {
                Some(o) if o != node => {
                    parent.insert(key, o);
                }
                _ => {
                    made.insert(key, (gtid, start));
                }
            }
        }
        // Only a node made inside a call of the export can be placed: the others keep their
        // replay's launch (and its correlation id).
        let mut spans: HashMap<i64, Vec<(Ns, Ns)>> = HashMap::default();
        let threads: HashSet<i64> = made.values().map(|m| m.0).collect();
        for t in ["CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER"] {
            if threads.is_empty() || !self.db.has(t) {
                continue;
            }
            for [start, end, gtid, class] in self
                .db
                .ints(t, &["start!", "end!", "globalTid", "eventClass"])?
            {
                if let (Some(a), Some(b), Some(g)) = (start, end, gtid) {
                    if threads.contains(&g) && !class.is_some_and(|c| CLASS_BACKTRACE.contains(&c))
                    {
                        spans.entry(g).or_default().push((a, b));
                    }
                }
            }
        }
        for v in spans.values_mut() {
            // By start, each with the latest end so far: a call holds t when the latest end
            // among those started by t reaches it.
            v.sort_unstable();
            let mut reach = Ns::MIN;
            for s in v.iter_mut() {
                reach = reach.max(s.1);
                s.1 = reach;
            }
        }
        made.retain(|_, &mut (g, t)| {
            spans.get(&g).is_some_and(|v| {
                let i = v.partition_point(|s| s.0 <= t);
                i > 0 && v[i - 1].1 >= t
            })
        });
        for &(pk, node) in made.keys().chain(parent.keys()) {
            // Clones of clones lead back to the original; a loop leads nowhere.
            let mut n = node;
            for _ in 0..64 {
                if let Some(&m) = made.get(&(pk, n)) {
                    self.node_origin.insert((pk, node), m);
                    break;
                }
                match parent.get(&(pk, n)) {
                    Some(&o) => n = o,
                    None => break,
                }
            }
        }
        Ok(())
    }

    /// A correlation id of its own for an op replayed from graph node `node` whose original's
    /// making is known.
    fn replay(&mut self, gpid: i64, node: i64, launch: Option<i64>) -> Option<u32> {
        let made = *self.node_origin.get(&(proc_key(gpid), node))?;
        let corr = OWN_CORR.checked_add(self.replayed.len() as u32)?;
        let proc = self.proc(gpid);
        self.replayed.push(Replayed {
            proc,
            launch: corr_of(launch),
            corr,
            made,
        });
        Some(corr)
    }

    /// The GPU ops of the kernel, memcpy and memset tables, and of the graphs traced whole.
    fn ops(&mut self) -> anyhow::Result<()> {
        // Each table with its graph column and the two columns its ops are named by.
        let tables = [
            (
                "CUPTI_ACTIVITY_KIND_KERNEL",
                Some(OpKind::Kernel),
                ["graphNodeId", "demangledName", "shortName"],
            ),
            (
                "CUPTI_ACTIVITY_KIND_MEMCPY",
                Some(OpKind::Memcpy),
                ["graphNodeId", "copyKind", "copyKind"],
            ),
            (
                "CUPTI_ACTIVITY_KIND_MEMSET",
                Some(OpKind::Memset),
                ["graphNodeId", "value", "value"],
            ),
            (
                "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
                None,
                ["graphId", "graphId", "graphExecId"],
            ),
        ];
        for (t, kind, [graph, a, b]) in tables {
            if !self.db.has(t) {
                continue;
            }
            let cols = [
                "start!",
                "end!",
                "deviceId",
                "streamId",
                "correlationId",
                "globalPid",
                graph,
                a,
                b,
            ];
            let rows = self.db.ints(t, &cols)?;
            if kind.is_none() && !rows.is_empty() {
                self.note(
                    "CUDA graphs traced whole (--cuda-graph-trace=graph): each replay is one op"
                        .into(),
                );
            }
            for [start, end, dev, stream, corr, gpid, graph, a, b] in rows {
                // A graph traced whole has no nodes.
                let node = graph.filter(|_| kind.is_some());
                let (name, kind) = match kind {
                    Some(OpKind::Kernel) => match self.strings.name(&mut self.store, a) {
                        0 => (self.strings.name(&mut self.store, b), OpKind::Kernel),
                        n => (n, OpKind::Kernel),
                    },
                    Some(OpKind::Memcpy) => {
                        let kinds = &gaptop_wire::COPY_KINDS;
                        let k = a.unwrap_or(0).clamp(0, kinds.len() as i64 - 1) as usize;
                        (self.store.names.intern(kinds[k]), OpKind::Memcpy)
                    }
                    Some(k) => (self.store.names.intern("Memset"), k),
                    None => {
                        let n = format!("CUDA graph {}", graph.unwrap_or(0));
                        (self.store.names.intern(&n), OpKind::Kernel)
                    }
                };
                let in_graph = graph.is_some();
                let as_corr = match (node, gpid) {
                    (Some(node), Some(gpid)) => self.replay(gpid, node, corr),
                    _ => None,
                };
                self.op(
                    gpid, dev, stream, start, end, kind, name, corr, in_graph, as_corr,
                );
            }
        }
        Ok(())
    }

    /// The API calls of the runtime and driver tables, and the chains older exports give in a
    /// second row of each call.
    fn calls(&mut self) -> anyhow::Result<Vec<RawCall>> {
        let cols = [
            "start!",
            "end!",
            "eventClass",
            "globalTid",
            "correlationId",
            "nameId!",
            "callchainId",
        ];
        let mut calls = Vec::new();
        let mut chains: HashMap<(u32, u32), i64> = HashMap::default();
        let mut held: HashMap<(u32, u32), (u32, Ns, Ns)> = HashMap::default();
        for t in ["CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER"] {
            if !self.db.has(t) {
                continue;
            }
            let rows = self.db.ints(t, &cols)?;
            for [start, end, class, gtid, corr, name, chain] in rows {
                let (Some(start), Some(end), Some(gtid)) = (start, end, gtid) else {
                    self.store.skip("API call without a time or a thread");
                    continue;
                };
                if let Some(v) = plausible::shape(What::ApiCall, start, end) {
                    let name = self.strings.name(&mut self.store, name);
                    self.store.drop_implausible(What::ApiCall, v, name);
                    continue;
                }
                let proc = self.proc(gtid);
                let corr = corr_of(corr);
                if class.is_some_and(|c| CLASS_BACKTRACE.contains(&c)) {
                    if let Some(c) = chain {
                        chains.insert((proc, corr), c);
                    }
                    if corr != 0 {
                        held.insert((proc, corr), (tid_of(gtid), start, end));
                    }
                    continue;
                }
                let name = self.strings.name(&mut self.store, name);
                calls.push(RawCall {
                    proc,
                    call: ApiCall {
                        start,
                        end,
                        corr,
                        tid: tid_of(gtid),
                        name,
                        stack: 0,
                        kind: ApiKind::classify(self.store.names.get(name)),
                    },
                    chain,
                    held: (start, end),
                });
            }
        }
        for c in &mut calls {
            if c.chain.is_none() {
                c.chain = chains.get(&(c.proc, c.call.corr)).copied();
            }
            // The backtrace row holds its call: on the same thread, around it.
            if let Some(&(tid, s, e)) = held.get(&(c.proc, c.call.corr)) {
                if tid == c.call.tid && s <= c.call.start && e >= c.call.end {
                    c.held = (s, e);
                }
            }
        }
        // One call per correlation id in a process: the first to start (its ops' launch).
        calls.sort_by_key(|c| (c.proc, c.call.start, c.call.corr));
        let mut seen: HashSet<(u32, u32)> = HashSet::default();
        for c in &mut calls {
            if c.call.corr != 0 && !seen.insert((c.proc, c.call.corr)) {
                c.call.corr = 0;
            }
        }
        Ok(calls)
    }

    /// The frames of the chains `wanted`, outermost first, by chain id.
    fn chains(&mut self, wanted: &HashSet<i64>) -> anyhow::Result<HashMap<i64, Chain>> {
        if wanted.is_empty() || !self.db.has("CUDA_CALLCHAINS") {
            return Ok(HashMap::default());
        }
        let rows = self.chain_rows("CUDA_CALLCHAINS", wanted)?;
        Ok(self.frames_of(rows, true))
    }

    /// The rows of chains `wanted` in a chain table (`CUDA_CALLCHAINS`, `SAMPLING_CALLCHAINS`),
    /// without kernel-mode frames (not the program's code).
    fn chain_rows(&self, table: &str, wanted: &HashSet<i64>) -> anyhow::Result<Vec<ChainRow>> {
        let mut rows: Vec<ChainRow> = Vec::new();
        self.db.each(
            table,
            &[
                "id!",
                "stackDepth!",
                "symbol",
                "module",
                "unresolved",
                "kernelMode",
            ],
            |r| {
                let Some(id) = int(r, 0, "id")? else {
                    return Ok(());
                };
                if wanted.contains(&id) && int(r, 5, "kernelMode")?.unwrap_or(0) == 0 {
                    rows.push(ChainRow {
                        id,
                        depth: int(r, 1, "stackDepth")?.unwrap_or(0),
                        frame: FrameKey {
                            symbol: int(r, 2, "symbol")?,
                            module: int(r, 3, "module")?,
                            unresolved: int(r, 4, "unresolved")?.unwrap_or(0) != 0,
                        },
                    });
                }
                Ok(())
            },
        )?;
        Ok(rows)
    }

    /// Chains' rows as frames, outermost first, by chain id; with `trim`, the CUDA libraries' and
    /// the profiler's frames next to the call are left out.
    fn frames_of(&mut self, mut rows: Vec<ChainRow>, trim: bool) -> HashMap<i64, Chain> {
        let mut out: HashMap<i64, Chain> = HashMap::default();
        // nsys writes each chain's rows together, from depth 0 up: sorting is cheap when so.
        rows.sort_unstable_by_key(|x| (x.id, x.depth));
        // Each frame's name, and whose code it is.
        let mut memo: HashMap<FrameKey, (NameId, Origin)> = HashMap::default();
        for chain in rows.chunk_by(|a, b| a.id == b.id) {
            let mut frames: Vec<(NameId, Origin)> = Vec::with_capacity(chain.len());
            // Depth 0 is the innermost frame: the outermost has the greatest depth.
            for row in chain.iter().rev() {
                let k = row.frame;
                let strings = &self.strings;
                let store = &mut self.store;
                frames.push(*memo.entry(k).or_insert_with(|| {
                    let sym = k.symbol.and_then(|s| strings.get(s)).unwrap_or("");
                    let module = k.module.and_then(|m| strings.get(m)).unwrap_or("");
                    let base = module.rsplit('/').next().unwrap_or(module);
                    let f = store.names.intern(&frame_text(sym, base, k.unresolved));
                    (f, Origin::of(base))
                }));
            }
            // The frames next to the call inside the CUDA libraries and the profiler are theirs,
            // not the program's: the call's own name follows the stack.
            while trim && frames.last().is_some_and(|f| f.1 == Origin::Tool) {
                frames.pop();
            }
            let below_interpreter = frames
                .iter()
                .rposition(|f| f.1 == Origin::Interpreter)
                .map_or(0, |i| i + 1);
            out.insert(
                chain[0].id,
                Chain {
                    frames: frames.into_iter().map(|f| f.0).collect(),
                    below_interpreter,
                },
            );
        }
        out
    }

    /// The CPU samples of `--sample=process-tree` (`COMPOSITE_EVENTS`, their user-mode stacks in
    /// `SAMPLING_CALLCHAINS`) and the Python samples of `--python-sampling` (`python`, periodic
    /// Python backtraces) as the threads' samples, for what the CPU did during gaps. A thread
    /// with Python samples keeps those (they name the Python code; its native samples show the
    /// interpreter). The sampling period is taken as the median interval between a thread's
    /// samples.
    fn cpu_samples(&mut self, python: Vec<PyTrace>) -> anyhow::Result<()> {
        let mut by_thread: HashMap<(u32, u32), Vec<CpuSample>> = HashMap::default();
        for p in python {
            if let Some(v) = self.verdict(What::CpuSample, p.time, p.time) {
                self.store.drop_implausible(What::CpuSample, v, 0);
                continue;
            }
            let proc = self.procs[&proc_key(p.gtid)];
            let stack = self.store.stacks.intern_path(0, p.frames);
            by_thread
                .entry((proc, tid_of(p.gtid)))
                .or_default()
                .push(CpuSample {
                    time: p.time,
                    stack,
                });
        }
        let with_python: HashSet<(u32, u32)> = by_thread.keys().copied().collect();
        let (ev, cc) = ("COMPOSITE_EVENTS", "SAMPLING_CALLCHAINS");
        if self.db.has(ev) && self.db.has(cc) {
            let mut samples: Vec<(i64, i64, Ns)> = Vec::new();
            let mut native_left = 0usize;
            for [id, start, gtid] in self.db.ints(ev, &["id!", "start!", "globalTid"])? {
                let (Some(id), Some(start), Some(gtid)) = (id, start, gtid) else {
                    continue;
                };
                if let Some(v) = self.verdict(What::CpuSample, start, start) {
                    self.store.drop_implausible(What::CpuSample, v, 0);
                } else if let Some(&proc) = self.procs.get(&proc_key(gtid)) {
                    if with_python.contains(&(proc, tid_of(gtid))) {
                        native_left += 1;
                    } else {
                        samples.push((gtid, id, start));
                    }
                } else {
                    // Processes that did no CUDA work explain no gap.
                    self.store.skip("CPU sample of a process without CUDA work");
                }
            }
            if native_left > 0 {
                self.note(format!(
                    "{native_left} native CPU samples of threads with Python samples left out \
                     (the Python samples name the code)"
                ));
            }
            let wanted: HashSet<i64> = samples.iter().map(|s| s.1).collect();
            let rows = self.chain_rows(cc, &wanted)?;
            let chains = self.frames_of(rows, false);
            for (gtid, id, time) in samples {
                let frames = chains.get(&id).map(|c| &c.frames[..]).unwrap_or(&[]);
                let stack = self.store.stacks.intern_path(0, frames.iter().copied());
                let proc = self.procs[&proc_key(gtid)];
                by_thread
                    .entry((proc, tid_of(gtid)))
                    .or_default()
                    .push(CpuSample { time, stack });
            }
        }
        let mut gaps: Vec<Ns> = Vec::new();
        for v in by_thread.values_mut() {
            v.sort_unstable_by_key(|x| x.time);
            gaps.extend(
                v.windows(2)
                    .map(|w| w[1].time - w[0].time)
                    .filter(|&d| d > 0),
            );
        }
        let period = if gaps.is_empty() {
            0
        } else {
            let i = gaps.len() / 2;
            *gaps.select_nth_unstable(i).1
        };
        let mut threads: Vec<_> = by_thread.into_iter().collect();
        threads.sort_unstable_by_key(|t| t.0);
        for ((proc, tid), v) in threads {
            self.store.procs[proc as usize].sample_period_ns = period;
            self.store.add_samples(proc, tid, &v);
        }
        Ok(())
    }

    /// Where the payloads of nsys's `PythonBacktrace` schema hold their fields: as the export's
    /// schema tables say, where it has them, else as nsys wrote them when this was written.
    fn python_layout(&self) -> anyhow::Result<pybacktrace::Layout> {
        let mut l = pybacktrace::Layout::default();
        let t = "NVTX_PAYLOAD_SCHEMAS";
        if !self.db.has(t) {
            return Ok(l);
        }
        let mut backtrace: Option<(Option<i64>, i64)> = None;
        let mut frame: Option<(Option<i64>, i64)> = None;
        let mut frame_size = None;
        self.db
            .each(t, &["domainId", "schemaId", "name", "payloadSize"], |r| {
                let name = text(r, 2, "name")?;
                match name.as_deref() {
                    Some(pybacktrace::SCHEMA) => {
                        if let Some(id) = int(r, 1, "schemaId")? {
                            backtrace = Some((int(r, 0, "domainId")?, id));
                        }
                    }
                    Some(pybacktrace::FRAME_SCHEMA) => {
                        frame_size = int(r, 3, "payloadSize")?;
                        if let Some(id) = int(r, 1, "schemaId")? {
                            frame = Some((int(r, 0, "domainId")?, id));
                        }
                    }
                    _ => {}
                }
                Ok(())
            })?;
        if let Some(size) = frame_size.filter(|&s| (20..=4096).contains(&s)) {
            l.frame_size = size as usize;
        }
        let t = "NVTX_PAYLOAD_SCHEMA_ENTRIES";
        if self.db.has(t) && (backtrace.is_some() || frame.is_some()) {
            let of = |r: &Row, which: Option<(Option<i64>, i64)>| -> anyhow::Result<bool> {
                let Some((domain, schema)) = which else {
                    return Ok(false);
                };
                Ok(int(r, 1, "schemaId")? == Some(schema)
                    && (domain.is_none() || int(r, 0, "domainId")? == domain))
            };
            self.db
                .each(t, &["domainId", "schemaId", "name", "offset"], |r| {
                    let Some(off) = int(r, 3, "offset")?.filter(|&o| (0..4096).contains(&o)) else {
                        return Ok(());
                    };
                    let off = off as usize;
                    let name = text(r, 2, "name")?;
                    if of(r, backtrace)? {
                        match name.as_deref() {
                            Some("Source") => l.source = off,
                            Some("Frames count") => l.count = off,
                            Some("Frames") => l.frames = off,
                            _ => {}
                        }
                    } else if of(r, frame)? {
                        match name.as_deref() {
                            Some("Function") => l.function = off,
                            Some(f) if f.starts_with("File") => l.file = off,
                            Some("Line") => l.line = off,
                            _ => {}
                        }
                    }
                    Ok(())
                })?;
        }
        let t = "NVTX_PAYLOAD_ENUM_ENTRIES";
        if self.db.has(t) {
            self.db.each(t, &["name", "value"], |r| {
                if text(r, 0, "name")?.as_deref() == Some("Periodic sampling") {
                    if let Some(v) = int(r, 1, "value")?.and_then(|v| u32::try_from(v).ok()) {
                        l.periodic = v;
                    }
                }
                Ok(())
            })?;
        }
        Ok(l)
    }

    /// The Python backtraces of nsys's `Python Backtrace` NVTX domain (`--python-backtrace=cuda`
    /// takes one inside each CUDA call, `--python-sampling` periodically), of the processes that
    /// did CUDA work, with their frames outermost first; or none, with a note, where the export
    /// holds the marks without their payloads. `domains`: the ids of that domain, as
    /// [`Import::ranges`] found them.
    fn python_backtraces(&mut self, domains: &[i64]) -> anyhow::Result<Vec<PyTrace>> {
        let t = "NVTX_EVENTS";
        if domains.is_empty() {
            return Ok(Vec::new());
        }
        let with_payload = self.db.columns(t)?.contains("binaryData");
        let layout = self.python_layout()?;
        let ids: Vec<String> = domains.iter().map(|d| d.to_string()).collect();
        let filter = format!(
            "eventType = {NVTX_MARK} AND domainId IN ({})",
            ids.join(", ")
        );
        let (mut marks, mut unreadable, mut truncated) = (0usize, 0usize, 0usize);
        let mut raw: Vec<(i64, Ns, pybacktrace::Backtrace)> = Vec::new();
        self.db.each_where(
            t,
            &["start!", "globalTid", "binaryData"],
            Some(&filter),
            |r| {
                marks += 1;
                let (Some(start), Some(gtid)) = (int(r, 0, "start")?, int(r, 1, "globalTid")?)
                else {
                    return Ok(());
                };
                let bytes = match r
                    .get_ref(2)
                    .map_err(|e| anyhow!("column binaryData: {e}"))?
                {
                    ValueRef::Blob(b) => pybacktrace::payload_bytes(Some(b), None),
                    ValueRef::Text(s) => {
                        pybacktrace::payload_bytes(None, std::str::from_utf8(s).ok())
                    }
                    _ => None,
                };
                match bytes.and_then(|b| pybacktrace::decode(&b, &layout)) {
                    Some(bt) if start.unsigned_abs() <= MAX_TS => {
                        truncated += bt.truncated as usize;
                        raw.push((gtid, start, bt));
                    }
                    _ => unreadable += with_payload as usize,
                }
                Ok(())
            },
        )?;
        if marks == 0 {
            return Ok(Vec::new());
        }
        if !with_payload {
            self.note(format!(
                "NVTX_EVENTS holds {marks} Python backtraces without their payloads (no \
                 binaryData column; nsys 2023.4 and older export none): launches have no Python \
                 frames (export the report with a newer nsys)"
            ));
            return Ok(Vec::new());
        }
        for _ in 0..unreadable {
            self.store
                .skip("Python backtrace with an unreadable payload");
        }
        for _ in 0..truncated {
            self.store.skip("Python backtrace cut short (frames kept)");
        }
        let mut memo: HashMap<pybacktrace::RawFrame, NameId> = HashMap::default();
        let mut out = Vec::with_capacity(raw.len());
        for (gtid, time, bt) in raw {
            if !self.procs.contains_key(&proc_key(gtid)) {
                self.store
                    .skip("Python backtrace of a process without CUDA work");
                continue;
            }
            let frames = bt
                .frames
                .iter()
                .rev()
                .map(|f| {
                    let strings = &self.strings;
                    let store = &mut self.store;
                    *memo.entry(*f).or_insert_with(|| {
                        let function = strings.get(f.function).unwrap_or("");
                        let file = strings.get(f.file).unwrap_or("");
                        store
                            .names
                            .intern(&pybacktrace::frame_text(function, file, f.line))
                    })
                })
                .collect();
            out.push(PyTrace {
                gtid,
                time,
                sampled: bt.sampled,
                frames,
            });
        }
        Ok(out)
    }

    /// NVTX ranges per (process, thread), in no order, and the ids of nsys's `Python Backtrace`
    /// domain (whose marks [`Import::python_backtraces`] reads).
    fn ranges(&mut self) -> anyhow::Result<(ThreadRanges, Vec<i64>)> {
        let mut out: ThreadRanges = HashMap::default();
        let t = "NVTX_EVENTS";
        if !self.db.has(t) {
            return Ok((out, Vec::new()));
        }
        let cols = [
            "start!",
            "end",
            "eventType!",
            "globalTid",
            "textId",
            "domainId",
            "text",
        ];
        let mut rows = Vec::new();
        self.db.each(t, &cols, |r| {
            let mut v = [None; 6];
            for (i, c) in cols[..6].iter().enumerate() {
                v[i] = int(r, i, c.trim_end_matches('!'))?;
            }
            rows.push((v, text(r, 6, "text")?));
            Ok(())
        })?;
        // Domains are named by their creation events (the default domain, 0, by none).
        let mut domains: HashMap<i64, NameId> = HashMap::default();
        for ([_, _, ty, _, text_id, domain], text) in &rows {
            if *ty == Some(NVTX_DOMAIN_CREATE) {
                let name = match text.as_deref().filter(|s| !s.is_empty()) {
                    Some(s) => self.store.names.intern(s),
                    None => self.strings.name(&mut self.store, *text_id),
                };
                domains.insert(domain.unwrap_or(0), name);
            }
        }
        let python: Vec<i64> = domains
            .iter()
            .filter(|&(_, &n)| self.store.names.get(n) == pybacktrace::DOMAIN)
            .map(|(&d, _)| d)
            .collect();
        for ([start, end, ty, gtid, text_id, domain], text) in rows {
            let ty = ty.unwrap_or(0);
            if ty == NVTX_MARK {
                // Python backtraces are marks of their own domain, read on their own.
                if !python.contains(&domain.unwrap_or(0)) {
                    self.store.skip("NVTX mark");
                }
                continue;
            }
            if ty != NVTX_PUSH_POP && ty != NVTX_START_END {
                continue;
            }
            let (Some(start), Some(gtid)) = (start, gtid) else {
                self.store.skip("NVTX range without a start or a thread");
                continue;
            };
            let Some(end) = end else {
                self.store.skip("NVTX range without an end");
                continue;
            };
            if let Some(v) = self.verdict(What::Range, start, end) {
                let name = match text.filter(|s| !s.is_empty()) {
                    Some(s) => self.store.names.intern(&s),
                    None => self.strings.name(&mut self.store, text_id),
                };
                self.store.drop_implausible(What::Range, v, name);
                continue;
            }
            // Ranges of processes that did no CUDA work explain no gap.
            let Some(&proc) = self.procs.get(&proc_key(gtid)) else {
                self.store.skip("NVTX range of a process without CUDA work");
                continue;
            };
            let name = match text.filter(|s| !s.is_empty()) {
                Some(s) => self.store.names.intern(&s),
                None => match self.strings.name(&mut self.store, text_id) {
                    0 => self.store.names.intern("(unnamed NVTX range)"),
                    n => n,
                },
            };
            let domain = match domain.unwrap_or(0) {
                0 => 0,
                d => match domains.get(&d) {
                    Some(&n) => n,
                    None => self.store.names.intern(&format!("(NVTX domain {d})")),
                },
            };
            out.entry((proc, tid_of(gtid))).or_default().push(RawRange {
                start,
                end,
                name,
                domain,
            });
        }
        Ok((out, python))
    }

    /// Gives each thread its ranges as spans, nested: a range's parent is the latest opened
    /// range that holds it whole (start/end ranges need not nest; one that crosses another's
    /// end becomes its sibling); and as its NVTX ranges, for the timeline's lane and steps.
    fn spans(&mut self, ranges: ThreadRanges) {
        for ((proc, tid), mut raw) in ranges {
            raw.sort_unstable_by_key(|r| (r.start, std::cmp::Reverse(r.end), r.name));
            let nvtx = raw
                .iter()
                .map(|r| {
                    crate::collect::model::ranges::Range::new(r.start, r.end, r.name, r.domain)
                })
                .collect();
            self.store.procs[proc as usize].set_ranges(tid, nvtx);
            let mut spans: Vec<Span> = Vec::with_capacity(raw.len());
            let mut open: Vec<usize> = Vec::new();
            for r in raw {
                while let Some(&i) = open.last() {
                    if spans[i].end >= r.end {
                        break;
                    }
                    open.pop();
                }
                let (parent, under): (u32, StackId) = match open.last() {
                    Some(&i) => (i as u32, spans[i].stack),
                    None => (u32::MAX, 0),
                };
                spans.push(Span {
                    start: r.start,
                    end: r.end,
                    stack: self.store.stacks.intern(under, r.name),
                    parent,
                });
                open.push(spans.len() - 1);
            }
            self.store.procs[proc as usize].spans.insert(tid, spans);
        }
    }
}

/// How long before a call's own start nsys may take the Python backtrace of it: it takes the
/// backtrace as it enters the call, before CUPTI's start of it (79 to 1,426 ns before, on the
/// H200 with nsys 2023.4, where the call's backtrace row starts at the backtrace's time).
const PYTHON_LEAD_NS: Ns = 5_000;

/// For each call, the Python backtrace taken in it (`--python-backtrace=cuda`), by index in
/// `traces`: on its thread, between its start (or its backtrace row's) and its end, else just
/// before its start (within [`PYTHON_LEAD_NS`]). The calls made inside it (a runtime call's
/// driver calls) get the same backtrace. Also the number of backtraces that fell in no call.
fn python_of_calls(
    im: &Import,
    calls: &[RawCall],
    traces: &[PyTrace],
) -> (Vec<Option<usize>>, usize) {
    let mut out = vec![None; calls.len()];
    let mut unmatched = 0;
    if traces.is_empty() {
        return (out, unmatched);
    }
    let mut by_thread: HashMap<(u32, u32), Vec<usize>> = HashMap::default();
    for (i, c) in calls.iter().enumerate() {
        by_thread.entry((c.proc, c.call.tid)).or_default().push(i);
    }
    for v in by_thread.values_mut() {
        v.sort_by_key(|&i| calls[i].held.0);
    }
    for (ti, t) in traces.iter().enumerate() {
        let Some(v) = im
            .procs
            .get(&proc_key(t.gtid))
            .and_then(|&p| by_thread.get(&(p, tid_of(t.gtid))))
        else {
            unmatched += 1;
            continue;
        };
        let n = v.partition_point(|&i| calls[i].held.0 <= t.time);
        // Calls on a thread nest a few deep at most: the ones that hold the time are among the
        // last few to start before it.
        let mut until = None;
        for &i in v[..n].iter().rev().take(8) {
            if calls[i].held.1 >= t.time && out[i].is_none() {
                out[i] = Some(ti);
                until = until.max(Some(calls[i].held.1));
            }
        }
        let mut from = n;
        if until.is_none() {
            match v.get(n) {
                Some(&i) if calls[i].held.0 - t.time <= PYTHON_LEAD_NS && out[i].is_none() => {
                    out[i] = Some(ti);
                    until = Some(calls[i].held.1);
                    from = n + 1;
                }
                _ => {
                    unmatched += 1;
                    continue;
                }
            }
        }
        // The calls made inside them start after the backtrace was taken: theirs too.
        if let Some(end) = until {
            for &i in v[from..].iter().take_while(|&&i| calls[i].held.0 <= end) {
                if calls[i].held.1 <= end && out[i].is_none() {
                    out[i] = Some(ti);
                }
            }
        }
    }
    (out, unmatched)
}

/// The periodic Python samples of `--python-sampling` on the threads they sampled. nsys takes
/// them on a thread of its own (`NSys PySampling`) and the payload does not say which thread
/// it sampled: a sample on a thread that made no CUDA call is the process's one thread that
/// did, where there is one; else it stays where it is (and explains no gap), noted.
fn sampled_threads(im: &mut Import, calls: &[RawCall], mut sampled: Vec<PyTrace>) -> Vec<PyTrace> {
    if sampled.is_empty() {
        return sampled;
    }
    let mut callers: HashMap<u32, HashSet<u32>> = HashMap::default();
    for c in calls {
        callers.entry(c.proc).or_default().insert(c.call.tid);
    }
    let (mut moved, mut left) = (0usize, 0usize);
    for p in &mut sampled {
        let Some(tids) = im
            .procs
            .get(&proc_key(p.gtid))
            .and_then(|proc| callers.get(proc))
        else {
            continue;
        };
        if tids.contains(&tid_of(p.gtid)) {
            continue;
        }
        if let (1, Some(&tid)) = (tids.len(), tids.iter().next()) {
            p.gtid = proc_key(p.gtid) | tid as i64;
            moved += 1;
        } else {
            left += 1;
        }
    }
    let mut note = format!(
        "Python samples (--python-sampling): {} as the threads' CPU samples",
        sampled.len()
    );
    if moved > 0 {
        note.push_str(&format!(
            "; {moved} taken on nsys's sampling thread given to the one thread that made CUDA calls"
        ));
    }
    if left > 0 {
        note.push_str(&format!(
            "; {left} taken on nsys's sampling thread left there (several threads made CUDA \
             calls, and a sample does not say which it is of)"
        ));
    }
    im.note(note);
    sampled
}

/// A call of its own for each replayed graph node whose making is known: its replay's
/// `cudaGraphLaunch` (times, thread, name), with the launch's stack, then [`CAPTURED_AT`], then
/// the stack of the call its original node was made in (the launch captured into the graph,
/// under its NVTX ranges and call chain), so that a graph's gaps name the code each node came
/// from. A node whose replay or making call is not in the export keeps its launch's stack.
fn captured_calls(
    im: &mut Import,
    calls: &[(u32, ApiCall)],
    replayed: &[Replayed],
) -> Vec<(u32, ApiCall)> {
    if replayed.is_empty() {
        // Most exports: no graph node to place, so no index of every call to build.
        return Vec::new();
    }
    let mut by_corr: HashMap<(u32, u32), usize> = HashMap::default();
    let mut by_thread: HashMap<(u32, u32), Vec<usize>> = HashMap::default();
    for (i, (proc, c)) in calls.iter().enumerate() {
        if c.corr != 0 {
            by_corr.insert((*proc, c.corr), i);
        }
        by_thread.entry((*proc, c.tid)).or_default().push(i);
    }
    for v in by_thread.values_mut() {
        v.sort_by_key(|&i| calls[i].1.start);
    }
    let marker = im.store.names.intern(CAPTURED_AT);
    let mut memo: HashMap<(StackId, StackId), StackId> = HashMap::default();
    let mut out = Vec::with_capacity(replayed.len());
    for r in replayed {
        let Some(&li) = by_corr.get(&(r.proc, r.launch)) else {
            continue;
        };
        let launch = calls[li].1;
        let (gtid, t) = r.made;
        let maker = im.procs.get(&proc_key(gtid)).and_then(|&p| {
            let v = by_thread.get(&(p, tid_of(gtid)))?;
            let i = v.partition_point(|&i| calls[i].1.start <= t);
            v[..i]
                .iter()
                .rev()
                .map(|&i| calls[i].1)
                .find(|c| c.end >= t)
        });
        let stack = match maker {
            Some(m) => *memo.entry((launch.stack, m.stack)).or_insert_with(|| {
                let s = im.store.stacks.intern(launch.stack, marker);
                let frames = im.store.stacks.frames(m.stack);
                im.store.stacks.intern_path(s, frames)
            }),
            None => launch.stack,
        };
        out.push((
            r.proc,
            ApiCall {
                corr: r.corr,
                stack,
                ..launch
            },
        ));
    }
    out
}

/// Modules whose frames next to a CUDA call are the CUDA libraries' or the profiler's own.
fn is_tool_module(base: &str) -> bool {
    base.starts_with("libcupti")
        || base.starts_with("libToolsInjection")
        || base.starts_with("libcuda.so")
        || base.starts_with("libcudart.so")
}

/// A chain's frame as gaptop's native frames read: `symbol [module]`, or `module+0xADDRESS`
/// where nsys could not name it (it gives the address as the symbol).
fn frame_text(sym: &str, base: &str, unresolved: bool) -> String {
    if sym.is_empty() || (unresolved && sym.starts_with("0x")) {
        format!("{}+{}", if base.is_empty() { "?" } else { base }, sym)
    } else if base.is_empty() {
        sym.to_string()
    } else {
        format!("{sym} [{base}]")
    }
}

/// Loads an Nsight Systems SQLite export; `source` names it in the store.
pub fn load_sqlite(path: &Path, source: &str, budget: usize) -> anyhow::Result<Store> {
    let db = Db::open(path)?;
    if !db.has("StringIds") {
        bail!("a SQLite database, but not an Nsight Systems export (no StringIds table)");
    }
    let gpu = [
        "CUPTI_ACTIVITY_KIND_KERNEL",
        "CUPTI_ACTIVITY_KIND_MEMCPY",
        "CUPTI_ACTIVITY_KIND_MEMSET",
        "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
    ];
    if !gpu.iter().any(|t| db.has(t)) {
        bail!(
            "an Nsight Systems export without GPU activity (no CUPTI_ACTIVITY_KIND_KERNEL, \
             _MEMCPY or _MEMSET table): capture with --trace=cuda"
        );
    }
    let strings = Strings::load(&db)?;
    let mut store = Store::new(budget);
    store.source = source.to_string();
    let mut im = Import {
        db,
        store,
        strings,
        procs: HashMap::default(),
        names: HashMap::default(),
        ranks: HashMap::default(),
        node_origin: HashMap::default(),
        replayed: Vec::new(),
        bulk: None,
    };
    im.version()?;
    for (t, lacks) in EXPECTED {
        // Older exports keep driver calls in a table of their own.
        let driver = t == "CUPTI_ACTIVITY_KIND_RUNTIME" && im.db.has("CUPTI_ACTIVITY_KIND_DRIVER");
        if !im.db.has(t) && !driver {
            im.note(format!("no {t}: {lacks}"));
        }
    }
    im.process_names()?;
    im.graph_nodes()?;
    im.ops()?;
    let mut calls = im.calls()?;
    im.judge_times(&mut calls);
    let wanted: HashSet<i64> = calls.iter().filter_map(|c| c.chain).collect();
    let chains = im.chains(&wanted)?;
    if im.db.has("CUDA_CALLCHAINS") && !calls.is_empty() && chains.is_empty() {
        im.note(
            "CUDA_CALLCHAINS holds no chain of a traced call: launches have no native stacks"
                .into(),
        );
    }
    let (ranges, python_domains) = im.ranges()?;
    im.spans(ranges);
    let (sampled, at_calls): (Vec<PyTrace>, Vec<PyTrace>) = im
        .python_backtraces(&python_domains)?
        .into_iter()
        .partition(|p| p.sampled);
    let (python, unmatched) = python_of_calls(&im, &calls, &at_calls);
    for _ in 0..unmatched {
        im.store
            .skip("Python backtrace taken in no traced CUDA call of its thread");
    }
    if !at_calls.is_empty() {
        let given = python.iter().filter(|p| p.is_some()).count();
        im.note(format!(
            "Python backtraces: {} taken in CUDA calls, {given} of {} calls given their Python frames",
            at_calls.len(),
            calls.len()
        ));
    }
    let sampled = sampled_threads(&mut im, &calls, sampled);
    if !sampled.is_empty() {
        // Python samples say what the CPU did, without the native samples.
        im.store
            .notes
            .retain(|n| !n.starts_with("no COMPOSITE_EVENTS"));
    }
    im.cpu_samples(sampled)?;
    let mut done: Vec<(u32, ApiCall)> = Vec::with_capacity(calls.len());
    for (c, py) in calls.into_iter().zip(python) {
        let p = &im.store.procs[c.proc as usize];
        let mut stack = p.span_stack_at(c.call.tid, c.call.start);
        let chain = c.chain.and_then(|id| chains.get(&id));
        let native = match (py, chain) {
            // Python's frames where the interpreter's were: the native frames below them stay.
            (Some(py), chain) => {
                stack = im
                    .store
                    .stacks
                    .intern_path(stack, at_calls[py].frames.iter().copied());
                chain.map_or(&[][..], |c| &c.frames[c.below_interpreter..])
            }
            (None, Some(c)) => &c.frames[..],
            (None, None) => &[][..],
        };
        let stack = im.store.stacks.intern_path(stack, native.iter().copied());
        done.push((c.proc, ApiCall { stack, ..c.call }));
    }
    let replayed = std::mem::take(&mut im.replayed);
    for (proc, call) in captured_calls(&mut im, &done, &replayed) {
        im.store.push_api_unsorted(proc, call);
    }
    for (proc, call) in done {
        im.store.push_api_unsorted(proc, call);
    }
    let mut store = im.store;
    store.finish_bulk();
    if store.total_ops == 0 {
        bail!("an Nsight Systems export without GPU ops (its kernel, memcpy and memset tables are empty)");
    }
    Ok(store)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialized_ids_split_into_process_and_thread() {
        // A thread of process 1230493 as a 2022 export on Perlmutter serialized it.
        let g = 302_119_224_788_637_i64;
        assert_eq!(pid_of(g), 1_230_493);
        assert_eq!(tid_of(g), 1_230_493);
        // The same process's own id (PROCESSES.globalPid) is the same process.
        assert_eq!(proc_key(g), proc_key(302_119_223_558_144));
        assert_eq!(pid_of(302_119_223_558_144), 1_230_493);
    }

    #[test]
    fn sniffs_by_first_bytes() {
        let p = Path::new("/nonexistent");
        assert_eq!(sniff(p, b"SQLite format 3\0rest"), Some(Kind::Sqlite));
        assert_eq!(
            sniff(p, b"NVIDIA Tegra Profiler Report 2025@1"),
            Some(Kind::Report)
        );
        assert_eq!(sniff(p, b"{\"traceEvents\": []}"), None);
        assert_eq!(sniff(p, b"SQLite format 2"), None);
    }
}
