//! Several traces as one capture: the ranks of a distributed run, given as files or as the
//! directory that holds them (HTA's usual input).
//!
//! Each trace becomes a process of the capture, with its rank from its header's
//! `distributedInfo` (else its file name, else none), its times on its host's absolute clock
//! (`baseTimeNanoseconds` + `ts`). Hosts' clocks are trusted as Kineto wrote them (HTA does
//! the same), unless the ranks' collectives say otherwise: NCCL kernels of one collective end
//! together on every rank (each waits for the last data to arrive), so when two ranks ran the
//! same sequence of collectives and their ends differ by the same amount (to within
//! [`END_TOLERANCE_NS`] for three quarters of them), that amount is the difference between
//! their clocks and the later rank's trace is moved onto the first one's. Traces that cannot
//! be of one run (the same rank twice, different world sizes, no common time) are refused.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use super::kineto::{file_label, open_maybe_gz, other_ranks_note, rank_in_name, Builder, Header};
use crate::model::records::{NameId, Ns, FLAG_COMM};
use crate::model::store::Store;
use crate::units::fmt_ns;

/// How far apart the ends of one collective may lie on two ranks whose clocks agree.
pub const END_TOLERANCE_NS: Ns = 20_000;

/// The fewest shared collectives a clock offset is measured from.
pub const MIN_COLLECTIVES: usize = 3;

/// Whether a directory entry is a trace: `*.json` or `*.json.gz` (torch.profiler writes
/// `*.pt.trace.json` and `*.pt.trace.json.gz`), or a recording (`*.rec`, `*.rec.gz`: one
/// `gaptop record` a node).
fn is_trace_name(name: &str) -> bool {
    [".json", ".json.gz", ".rec", ".rec.gz"]
        .iter()
        .any(|e| name.ends_with(e))
}

/// The files the paths name: a file as it is, a directory as the traces directly in it,
/// sorted by name (a named pipe, socket or device with a trace's name is skipped, and said). A directory without traces, or a file named twice, is an error.
pub fn expand(paths: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        if !p.is_dir() {
            crate::files::refuse_special(p)?;
            out.push(p.clone());
            continue;
        }
        let shown = p.display();
        let mut found: Vec<PathBuf> = std::fs::read_dir(p)
            .with_context(|| format!("{shown}: cannot read the directory"))?
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|f| is_trace_name(&file_label(f)))
            .filter(|f| match crate::files::special(f) {
                // Never opened (it could block): said, so that a missing rank has a reason.
                Some(what) => {
                    crate::say!("gaptop: {}: is {what}, not a file: skipped", f.display());
                    false
                }
                None => f.is_file(),
            })
            .collect();
        if found.is_empty() {
            bail!("{shown}: no traces in it (*.json, *.json.gz, *.rec)");
        }
        found.sort();
        out.extend(found);
    }
    for (i, a) in out.iter().enumerate() {
        let ca = a.canonicalize().unwrap_or_else(|_| a.clone());
        if out[..i]
            .iter()
            .any(|b| b.canonicalize().unwrap_or_else(|_| b.clone()) == ca)
        {
            bail!("{}: given twice", a.display());
        }
    }
    Ok(out)
}

/// What the capture is called: the directory it came from, or its files' names.
pub fn describe(paths: &[PathBuf], files: &[PathBuf]) -> String {
    if let [dir] = paths {
        if dir.is_dir() {
            return format!("{} ({} traces)", dir.display(), files.len());
        }
    }
    let names: Vec<String> = files.iter().map(|f| file_label(f)).collect();
    if names.len() <= 3 {
        names.join(" + ")
    } else {
        format!("{} + {} more", names[..2].join(" + "), names.len() - 2)
    }
}

/// One trace of the set, as read.
struct Read {
    path: PathBuf,
    header: Header,
    /// The processes it made (one; an export makes one per process it holds).
    procs: std::ops::Range<u32>,
    ops: u64,
}

impl Read {
    fn rank(&self, store: &Store) -> i32 {
        store.procs[self.procs.start as usize].rank
    }
}

/// How many traces are read at once: `GAPTOP_READ_THREADS` when set (1 reads them one after
/// another), else one a core (each trace's reading is itself three threads that overlap).
pub fn read_threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    threads_from(std::env::var("GAPTOP_READ_THREADS").ok().as_deref(), cores)
}

/// The reading threads `GAPTOP_READ_THREADS` asks for (`var`), else `cores`; 1 to 64.
fn threads_from(var: Option<&str>, cores: usize) -> usize {
    var.and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(cores)
        .clamp(1, 64)
}

/// One trace read into a builder of its own, its file ended (its rank and clock set).
fn read_trace(path: &Path, source: &str, budget: usize) -> anyhow::Result<(Builder, Header)> {
    let label = file_label(path);
    let mut b = Builder::new(budget, source);
    b.begin_file(&label);
    let header = open_maybe_gz(path)
        .and_then(|r| b.read(r))
        .map_err(|e| anyhow::anyhow!("{}: {e:#}", path.display()))?;
    if b.store.window.is_some() {
        bail!(
            "{}: a gaptop export opens alone, not joined with other traces",
            path.display()
        );
    }
    b.end_file(&header, rank_in_name(&label));
    Ok((b, header))
}

/// Loads Kineto traces (at least two) as one capture, [`read_threads`] of them at once, each
/// into a builder of its own, taken into the capture's in the files' order: the capture is
/// the same however many are read at once. Errors are one line and name the file (the first
/// file in order that has one).
pub fn load_traces(files: &[PathBuf], source: &str, budget: usize) -> anyhow::Result<Store> {
    load_traces_with(files, source, budget, read_threads())
}

/// [`load_traces`] reading `threads` traces at once.
pub fn load_traces_with(
    files: &[PathBuf],
    source: &str,
    budget: usize,
    threads: usize,
) -> anyhow::Result<Store> {
    let mut b = Builder::new(budget, source);
    let mut reads: Vec<Read> = Vec::new();
    let read = |i: usize| read_trace(&files[i], source, budget);
    super::in_order::run(files.len(), threads, read, |i, got| {
        let (file, header) = got?;
        let (ops, events) = (b.store.total_ops, b.events);
        let procs = b.absorb(file);
        let read = Read {
            path: files[i].clone(),
            header,
            procs,
            ops: b.store.total_ops - ops,
        };
        if read.ops == 0 {
            // A rank that ran nothing on a GPU (HTA's test sets have them): said, not fatal.
            let why = format!("trace without GPU ops ({})", file_label(&files[i]));
            *b.store.skipped.entry(why).or_insert(0) += b.events - events;
        }
        reads.push(read);
        Ok(())
    })?;
    check_one_run(&reads, &b.store)?;
    let mut store = b.finish_checked()?;
    let ranks: Vec<i32> = reads.iter().map(|r| r.rank(&store)).collect();
    let world = reads.iter().find_map(|r| r.header.world_size);
    store.notes.extend(other_ranks_note(&ranks, world));
    joined(store, &reads)
}

/// The sources of one run, read into one store, put on one clock (`align_clocks`) and
/// refused if their work never meets in time.
fn joined(mut store: Store, reads: &[Read]) -> anyhow::Result<Store> {
    store.clocks = Some(align_clocks(&mut store, reads));
    check_overlap(reads, &store)?;
    Ok(store)
}

/// Loads the recordings of a job's nodes (one `gaptop record` a node, at least two) as one
/// capture: each node's processes keep their ranks (the collectors' `RANK`), and each node's
/// clock is aligned on the collectives as a rank set's are (a node's processes share its
/// clock, so they move together). [`read_threads`] recordings are read at once, each into a
/// store of its own, taken into the capture in the files' order: the same capture however
/// many are read at once.
pub fn load_recordings(files: &[PathBuf], source: &str, budget: usize) -> anyhow::Result<Store> {
    load_recordings_with(files, source, budget, read_threads())
}

/// [`load_recordings`] reading `threads` recordings at once.
pub fn load_recordings_with(
    files: &[PathBuf],
    source: &str,
    budget: usize,
    threads: usize,
) -> anyhow::Result<Store> {
    let mut store = Store::new(budget);
    store.source = source.to_string();
    let mut reads: Vec<Read> = Vec::new();
    let read = |i: usize| -> anyhow::Result<Store> {
        let mut one = Store::new(budget);
        one.source = source.to_string();
        super::recording::read_file(&files[i], &mut one)
            .map_err(|e| anyhow::anyhow!("{}: {e:#}", files[i].display()))?;
        Ok(one)
    };
    super::in_order::run(files.len(), threads, read, |i, got| {
        let one = got?;
        let path = &files[i];
        let ops = one.total_ops;
        let map = store.intern_all_of(&one);
        let procs = store.absorb(one, &map, None);
        let label = file_label(path);
        if procs.is_empty() {
            bail!("{}: a recording without a program in it", path.display());
        }
        // One program without RANK in its environment: its rank from the file's name.
        if let (1, Some(r)) = (procs.len(), rank_in_name(&label)) {
            let p = &mut store.procs[procs.start as usize];
            if p.rank < 0 {
                p.rank = r;
            }
        }
        let read = Read {
            path: path.clone(),
            header: Header::default(),
            procs,
            ops,
        };
        if read.ops == 0 {
            let why = format!("recording without GPU ops ({label})");
            *store.skipped.entry(why).or_insert(0) += 1;
        }
        reads.push(read);
        Ok(())
    })?;
    store.finish_bulk();
    if store.total_ops == 0 {
        bail!("{source}: the recordings hold no GPU ops");
    }
    check_one_run(&reads, &store)?;
    joined(store, &reads)
}

/// Refuses traces that cannot be of one run: the same rank twice (in one trace or two),
/// different world sizes.
fn check_one_run(reads: &[Read], store: &Store) -> anyhow::Result<()> {
    let mut seen: Vec<(i32, &Path)> = Vec::new();
    for (i, a) in reads.iter().enumerate() {
        for p in a.procs.clone() {
            let r = store.procs[p as usize].rank;
            if r < 0 {
                continue;
            }
            if let Some((_, b)) = seen.iter().find(|s| s.0 == r) {
                if *b == a.path.as_path() {
                    bail!("{} holds rank {r} twice", b.display());
                }
                bail!(
                    "{} and {} are both rank {r}: traces of different runs?",
                    b.display(),
                    a.path.display()
                );
            }
            seen.push((r, a.path.as_path()));
        }
        for b in &reads[..i] {
            if let (Some(x), Some(y)) = (b.header.world_size, a.header.world_size) {
                if x != y {
                    bail!(
                        "{} is of a run of {x} ranks, {} of {y}: traces of different runs",
                        b.path.display(),
                        a.path.display()
                    );
                }
            }
        }
    }
    Ok(())
}

/// The GPU ops' span of a trace's processes, if it has any.
fn span_of(store: &Store, procs: &std::ops::Range<u32>) -> Option<(Ns, Ns)> {
    store
        .lanes
        .iter()
        .filter(|l| procs.contains(&l.key.proc) && !l.is_empty())
        .map(|l| (l.op(0).start, l.max_end()))
        .reduce(|a, b| (a.0.min(b.0), a.1.max(b.1)))
}

/// Refuses traces whose GPU work does not meet in time: they cannot be one run.
fn check_overlap(reads: &[Read], store: &Store) -> anyhow::Result<()> {
    let mut spans: Vec<(Ns, Ns, &Path)> = reads
        .iter()
        .filter_map(|r| span_of(store, &r.procs).map(|(a, b)| (a, b, r.path.as_path())))
        .collect();
    spans.sort_by_key(|s| s.0);
    let mut reach: Option<(Ns, &Path)> = None;
    for &(start, end, path) in &spans {
        if let Some((e, p)) = reach {
            if start > e {
                bail!(
                    "{} ends {} before {} begins: traces of different runs?",
                    p.display(),
                    fmt_ns(start.saturating_sub(e)),
                    path.display()
                );
            }
        }
        if reach.is_none_or(|(e, _)| end > e) {
            reach = Some((end, path));
        }
    }
    Ok(())
}

/// A communication kernel: its start, end and name.
pub type CommOp = (Ns, Ns, NameId);

/// The communication kernels of some processes in time order.
fn comm_ops(store: &Store, procs: &std::ops::Range<u32>) -> Vec<CommOp> {
    let mut v: Vec<CommOp> = store
        .lanes
        .iter()
        .filter(|l| procs.contains(&l.key.proc))
        .flat_map(|l| l.iter())
        .filter(|o| o.flags & FLAG_COMM != 0)
        .map(|o| (o.start, o.end, o.name))
        .collect();
    v.sort();
    v
}

/// How far `other`'s clock is behind `reference`'s, measured on the ends of the collectives
/// they share (the k-th of each is the same one), when they ran the same ones and the ends
/// agree on it; otherwise why not.
pub fn clock_offset(reference: &[CommOp], other: &[CommOp]) -> Result<Ns, String> {
    if reference.len() != other.len() {
        return Err(format!(
            "{} collectives against {}",
            other.len(),
            reference.len()
        ));
    }
    if reference.len() < MIN_COLLECTIVES {
        return Err(format!("only {} collectives", reference.len()));
    }
    if reference.iter().zip(other).any(|(a, b)| a.2 != b.2) {
        return Err("not the same collectives in the same order".into());
    }
    let mut d: Vec<Ns> = reference
        .iter()
        .zip(other)
        .map(|(a, b)| a.1.checked_sub(b.1))
        .collect::<Option<_>>()
        .ok_or("their clocks are further apart than a clock holds")?;
    d.sort_unstable();
    let offset = d[d.len() / 2];
    let agree = d
        .iter()
        .filter(|&&x| x.abs_diff(offset) <= END_TOLERANCE_NS as u64)
        .count();
    if 4 * agree < 3 * d.len() {
        return Err(format!(
            "their ends agree on no one offset ({agree} of {} within {})",
            d.len(),
            fmt_ns(END_TOLERANCE_NS)
        ));
    }
    Ok(offset)
}

/// Puts every trace on the clock of the first rank's where their collectives allow it (see
/// the module's comment), and says what was done.
fn align_clocks(store: &mut Store, reads: &[Read]) -> String {
    let mut with_comm: Vec<(&Read, Vec<CommOp>)> = reads
        .iter()
        .map(|r| (r, comm_ops(store, &r.procs)))
        .filter(|(_, c)| !c.is_empty())
        .collect();
    let recorded = "as recorded (each trace on its host's clock)";
    if with_comm.len() < 2 {
        return format!("{recorded}: fewer than two ranks ran collectives to align them on");
    }
    // The reference: the lowest rank (unknown ranks last), then the first file.
    with_comm.sort_by_key(|(r, _)| {
        let k = r.rank(store);
        (k < 0, k)
    });
    let (refr, refc) = &with_comm[0];
    let who = |r: &Read| match r.rank(store) {
        k if k >= 0 => format!("rank {k}"),
        _ => file_label(&r.path),
    };
    let (mut moved, mut kept, mut shifts) = (Vec::new(), Vec::new(), Vec::new());
    let mut unaligned = Vec::new();
    for (r, c) in &with_comm[1..] {
        match clock_offset(refc, c) {
            Ok(by) => {
                let sign = if by < 0 { "-" } else { "+" };
                moved.push(format!("{} {sign}{}", who(r), fmt_ns(by.saturating_abs())));
                shifts.push((r.procs.clone(), by));
            }
            Err(why) => {
                kept.push(format!("{}: {why}", who(r)));
                unaligned.push(r.rank(store));
            }
        }
    }
    let mut says = Vec::new();
    if !moved.is_empty() {
        says.push(format!(
            "aligned to {} on the ends of shared collectives: {}",
            who(refr),
            moved.join(", ")
        ));
    }
    if !kept.is_empty() {
        says.push(format!("{recorded}, not aligned: {}", kept.join("; ")));
    }
    store.unaligned = unaligned;
    for (procs, by) in shifts {
        for p in procs {
            store.shift_process(p, by);
        }
    }
    says.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ends(v: &[Ns]) -> Vec<CommOp> {
        v.iter().map(|&e| (e - 10, e, 1)).collect()
    }

    #[test]
    fn a_clock_offset_needs_the_same_collectives_ending_together() {
        let r = ends(&[1_000_000, 2_000_000, 3_000_000, 4_000_000]);
        // 5 ms behind, give or take a few µs of the ring's last step.
        let o = ends(&[-4_000_000, -2_997_000, -1_999_000, -1_000_000]);
        assert_eq!(clock_offset(&r, &o), Ok(5_000_000), "the median difference");
        // One collective out of four far off still leaves three quarters agreeing.
        let o = ends(&[-4_000_000, -3_000_000, -1_000_000, -1_000_000]);
        assert_eq!(clock_offset(&r, &o), Ok(5_000_000));
        // Two out of four do not.
        let o = ends(&[-4_000_000, -2_000_000, -1_000_000, -1_000_000]);
        assert!(clock_offset(&r, &o)
            .unwrap_err()
            .contains("agree on no one offset"));
        // Not the same number, too few, or other collectives.
        assert!(clock_offset(&r, &r[..3])
            .unwrap_err()
            .contains("3 collectives against 4"));
        assert!(clock_offset(&r[..2], &r[..2])
            .unwrap_err()
            .contains("only 2"));
        let mut other = r.clone();
        other[1].2 = 2;
        assert!(clock_offset(&r, &other)
            .unwrap_err()
            .contains("not the same collectives"));
    }

    #[test]
    fn directories_hold_their_traces_sorted() {
        let d = std::env::temp_dir().join(format!("gaptop-traceset-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("sub")).unwrap();
        for f in [
            "rank-1.pt.trace.json.gz",
            "rank-0.json",
            "notes.txt",
            "sub/x.json",
        ] {
            std::fs::write(d.join(f), b"{}").unwrap();
        }
        let got = expand(std::slice::from_ref(&d)).unwrap();
        let names: Vec<String> = got.iter().map(|p| file_label(p)).collect();
        assert_eq!(names, ["rank-0.json", "rank-1.pt.trace.json.gz"]);
        assert_eq!(
            describe(std::slice::from_ref(&d), &got),
            format!("{} (2 traces)", d.display())
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}
