//! The export as a database: its tables and their columns as SQLite says, rows read by column
//! name (a required column missing, or a value of the wrong type, is an error naming the table
//! and the column), its `StringIds`, and the serialized ids (`globalTid`, `globalPid`) every
//! table uses. Every reader of a table goes through here, so how a row is read and how a
//! missing column reads (NULL) are decided once.

use std::path::Path;

use anyhow::{anyhow, bail};
use rusqlite::{Connection, OpenFlags, Row};
use rustc_hash::FxHashSet as HashSet;

use crate::model::records::NameId;
use crate::model::store::Store;

/// The export's tables and their columns, as the database says.
pub(super) struct Db {
    conn: Connection,
    tables: HashSet<String>,
}

impl Db {
    pub(super) fn open(path: &Path) -> anyhow::Result<Db> {
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

    pub(super) fn has(&self, table: &str) -> bool {
        self.tables.contains(table)
    }

    pub(super) fn columns(&self, table: &str) -> anyhow::Result<HashSet<String>> {
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
    pub(super) fn each(
        &self,
        table: &str,
        cols: &[&str],
        f: impl FnMut(&Row) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        self.each_where(table, cols, None, f)
    }

    /// [`Db::each`] on the rows that SQL condition `filter` (on columns the table has) holds for.
    pub(super) fn each_where(
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
    pub(super) fn ints<const N: usize>(
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
pub(super) fn int(r: &Row, i: usize, name: &str) -> anyhow::Result<Option<i64>> {
    r.get::<_, Option<i64>>(i)
        .map_err(|e| anyhow!("column {name}: {e}"))
}

pub(super) fn text(r: &Row, i: usize, name: &str) -> anyhow::Result<Option<String>> {
    r.get::<_, Option<String>>(i)
        .map_err(|e| anyhow!("column {name}: {e}"))
}

/// `StringIds`, sorted by id, with the store's name of each string once it is asked for.
pub(super) struct Strings {
    ids: Vec<i64>,
    values: Vec<Box<str>>,
    interned: Vec<NameId>,
}

const NOT_INTERNED: NameId = NameId::MAX;

impl Strings {
    pub(super) fn load(db: &Db) -> anyhow::Result<Strings> {
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

    pub(super) fn get(&self, id: i64) -> Option<&str> {
        self.ids.binary_search(&id).ok().map(|i| &*self.values[i])
    }

    /// The store's name of string `id` (0, the empty name, for an unknown id).
    pub(super) fn name(&mut self, store: &mut Store, id: Option<i64>) -> NameId {
        let Some(i) = id.and_then(|id| self.ids.binary_search(&id).ok()) else {
            return 0;
        };
        if self.interned[i] == NOT_INTERNED {
            self.interned[i] = store.names.intern(&self.values[i]);
        }
        self.interned[i]
    }
}

/// The process of a serialized id: the id with the thread's bits cleared.
pub(super) fn proc_key(gid: i64) -> i64 {
    gid & !0xFF_FFFF
}

pub(super) fn pid_of(gid: i64) -> u32 {
    ((gid >> 24) & 0xFF_FFFF) as u32
}

pub(super) fn tid_of(gid: i64) -> u32 {
    (gid & 0xFF_FFFF) as u32
}

pub(super) fn corr_of(c: Option<i64>) -> u32 {
    c.unwrap_or(0).clamp(0, u32::MAX as i64) as u32
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
}
