//! The state one reading of an export shares between its tables ([`Import`]): the database,
//! the store being filled, the processes made so far with their names and ranks, the graph
//! nodes' origins, and where the bulk of the export's times lie; with what every table's
//! reader asks of it (a process by serialized id, a note, a verdict on a record's times), and
//! the two small tables read first (the export's version, the processes' names and ranks).
//! The readers of the other tables each add their own `impl Import` in a file of their own.

use rustc_hash::FxHashMap as HashMap;

use super::db::{int, pid_of, proc_key, text, Db, Strings};
use crate::model::plausible::{self, FileBulk, Verdict, What};
use crate::model::records::Ns;
use crate::model::store::Store;

/// One reading of an export: the database, the store it fills, and what the tables read so far
/// tell the ones read after.
pub(super) struct Import {
    pub(super) db: Db,
    pub(super) store: Store,
    pub(super) strings: Strings,
    pub(super) procs: HashMap<i64, u32>,
    pub(super) names: HashMap<i64, String>,
    pub(super) ranks: HashMap<i64, i32>,
    /// Each CUDA graph node's original (the node captured or added by the program, that an
    /// instantiated graph's node was cloned from): where and when it was made, by (process
    /// key, node id).
    pub(super) node_origin: HashMap<(i64, i64), (i64, Ns)>,
    /// Ops replayed from a graph whose original node's making is known, each given a
    /// correlation id of its own for a call that says where the node was captured.
    pub(super) replayed: Vec<Replayed>,
    /// Where the bulk of the export's times lie, once its ops and calls are read
    /// (`model::plausible`).
    pub(super) bulk: Option<FileBulk>,
}

/// A graph node's op given a call of its own: its process, the `cudaGraphLaunch` that replayed
/// it, the correlation id of its own, and the thread and time its original node was made at.
pub(super) struct Replayed {
    pub(super) proc: u32,
    pub(super) launch: u32,
    pub(super) corr: u32,
    pub(super) made: (i64, Ns),
}

impl Import {
    /// The store's process of serialized id `gid`, made on first use.
    pub(super) fn proc(&mut self, gid: i64) -> u32 {
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

    pub(super) fn note(&mut self, s: String) {
        self.store.notes.push(s);
    }

    /// What `model::plausible`'s rule says of a record: by its shape alone until the
    /// export's bulk is known.
    pub(super) fn verdict(&self, what: What, start: Ns, end: Ns) -> Option<Verdict> {
        match &self.bulk {
            Some(b) => b.judge(what, start, end),
            None => plausible::shape(what, start, end),
        }
    }

    pub(super) fn version(&mut self) -> anyhow::Result<()> {
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

    pub(super) fn process_names(&mut self) -> anyhow::Result<()> {
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
}
