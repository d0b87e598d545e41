//! Call chains as frames: `CUDA_CALLCHAINS` (`--cudabacktrace`, a CUDA call's native stack) and
//! `SAMPLING_CALLCHAINS` (a CPU sample's), read as `symbol [module]` frames outermost first,
//! without kernel-mode frames, and for a call without the CUDA libraries' and the profiler's
//! own frames next to it; each chain says where the frames below the Python interpreter's
//! start, where a Python backtrace's frames go instead. Both the calls and the CPU samples
//! read chains this way, so it is a module of its own.

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use super::db::int;
use super::import::Import;
use crate::model::records::NameId;

/// A frame of `CUDA_CALLCHAINS`: its symbol's and module's strings.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct FrameKey {
    symbol: Option<i64>,
    module: Option<i64>,
    unresolved: bool,
}

/// A call chain's frames, outermost first, and where the frames below the Python interpreter's
/// innermost one start (0 when it has none): where a Python backtrace's frames go instead.
pub(super) struct Chain {
    pub(super) frames: Vec<NameId>,
    pub(super) below_interpreter: usize,
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

pub(super) struct ChainRow {
    id: i64,
    depth: i64,
    frame: FrameKey,
}

impl Import {
    /// The frames of the chains `wanted`, outermost first, by chain id.
    pub(super) fn chains(&mut self, wanted: &HashSet<i64>) -> anyhow::Result<HashMap<i64, Chain>> {
        if wanted.is_empty() || !self.db.has("CUDA_CALLCHAINS") {
            return Ok(HashMap::default());
        }
        let rows = self.chain_rows("CUDA_CALLCHAINS", wanted)?;
        Ok(self.frames_of(rows, true))
    }

    /// The rows of chains `wanted` in a chain table (`CUDA_CALLCHAINS`, `SAMPLING_CALLCHAINS`),
    /// without kernel-mode frames (not the program's code).
    pub(super) fn chain_rows(
        &self,
        table: &str,
        wanted: &HashSet<i64>,
    ) -> anyhow::Result<Vec<ChainRow>> {
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
    pub(super) fn frames_of(&mut self, mut rows: Vec<ChainRow>, trim: bool) -> HashMap<i64, Chain> {
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
        gaptop_wire::stackframe::native_name(sym, base)
    }
}
