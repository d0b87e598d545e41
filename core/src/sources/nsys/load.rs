//! The reading of one SQLite export, in order: the database checked to be an export with GPU
//! activity, the tables it lacks noted with what each costs, then processes, graph nodes, ops,
//! calls (their times judged), chains, NVTX ranges, Python backtraces and CPU samples, and
//! last each call's stack made (NVTX ranges, then Python frames, then native frames) and the
//! calls of replayed graph nodes added. The one place that knows the order the tables'
//! readers depend on.

use std::path::Path;

use anyhow::bail;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use super::db::{Db, Strings};
use super::graphs::captured_calls;
use super::import::Import;
use super::python::{python_of_calls, sampled_threads, PyTrace};
use crate::model::records::ApiCall;
use crate::model::store::Store;

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
    store.fold_stacks();
    store.finish_bulk();
    if store.total_ops == 0 {
        bail!("an Nsight Systems export without GPU ops (its kernel, memcpy and memset tables are empty)");
    }
    Ok(store)
}
