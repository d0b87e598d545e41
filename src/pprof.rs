//! `gaptop report --format pprof`: the GPU's idle time by launch stack as a gzipped pprof
//! `profile.proto`, which `go tool pprof`, the Perfetto UI, Grafana Pyroscope and speedscope
//! read.
//!
//! Each sample is one launch path, innermost first as the format has it: the op a gap ended
//! at, the call that launched it, then its Python (and `--native`) frames out to the
//! outermost, without the framework plumbing frames the UI and `--format folded` leave out.
//! Its values, in this order (`sample_type`):
//!
//! - `idle` (nanoseconds, the default): the time of the gaps charged to that launch, on the
//!   report's basis (device idle, or each stream's own with `--per-stream`); all samples add up
//!   to the report's charged idle;
//! - `gaps` (count): how many gaps;
//! - `cpu_samples` (count): where the program was sampled (`gaptop run`/`record`), the CPU
//!   samples of the launching thread taken during those gaps.
//!
//! A gap during which the launching thread was sampled has its time shared among those samples,
//! whose frames hang under the op below a `(CPU during these gaps)` frame, as in
//! `--format folded-cpu`: a flame graph then shows what the CPU did while the GPU waited, under
//! the launch that waited. Its gap is counted on the launch path itself. `pprof
//! -prune_from='^\(CPU during'` folds them back into their launch.
//!
//! Labels: `cause` (host_wait, kernel_wait, other: HTA's), `reason` (launch, sync, event_wait,
//! graph, unknown), `device` (`gpu0`) and the number `pid`.
//!
//! Python frames become functions named by their qualified name with their file, and
//! locations with their line; native frames `symbol [lib]` functions named by the symbol,
//! with the library as their file; the other frames (APIs, ops, unnamed native frames) are
//! named as they are (pprof shortens C++ names; `-symbolize=demangle=full` keeps them whole). `time_nanos` is the window's start on the source's clock (nanoseconds
//! since the epoch for CUPTI and Kineto), `duration_nanos` its length.

use std::collections::HashMap;
use std::io::Write;

use gaptop_core::analysis::gaps::{self, Category, Config, Reason};

use gaptop_core::frames::StackFrame;
use gaptop_core::model::records::{NameId, Ns, StackId};
use gaptop_core::model::store::Store;
use gaptop_core::model::window::Window;

/// The messages of pprof's `profile.proto` (github.com/google/pprof, proto/profile.proto),
/// with its field numbers.
pub mod proto {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Profile {
        #[prost(message, repeated, tag = "1")]
        pub sample_type: Vec<ValueType>,
        #[prost(message, repeated, tag = "2")]
        pub sample: Vec<Sample>,
        #[prost(message, repeated, tag = "3")]
        pub mapping: Vec<Mapping>,
        #[prost(message, repeated, tag = "4")]
        pub location: Vec<Location>,
        #[prost(message, repeated, tag = "5")]
        pub function: Vec<Function>,
        #[prost(string, repeated, tag = "6")]
        pub string_table: Vec<String>,
        #[prost(int64, tag = "7")]
        pub drop_frames: i64,
        #[prost(int64, tag = "8")]
        pub keep_frames: i64,
        #[prost(int64, tag = "9")]
        pub time_nanos: i64,
        #[prost(int64, tag = "10")]
        pub duration_nanos: i64,
        #[prost(message, optional, tag = "11")]
        pub period_type: Option<ValueType>,
        #[prost(int64, tag = "12")]
        pub period: i64,
        #[prost(int64, repeated, tag = "13")]
        pub comment: Vec<i64>,
        #[prost(int64, tag = "14")]
        pub default_sample_type: i64,
        #[prost(int64, tag = "15")]
        pub doc_url: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ValueType {
        #[prost(int64, tag = "1")]
        pub r#type: i64,
        #[prost(int64, tag = "2")]
        pub unit: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        /// Innermost first.
        #[prost(uint64, repeated, tag = "1")]
        pub location_id: Vec<u64>,
        #[prost(int64, repeated, tag = "2")]
        pub value: Vec<i64>,
        #[prost(message, repeated, tag = "3")]
        pub label: Vec<Label>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Label {
        #[prost(int64, tag = "1")]
        pub key: i64,
        #[prost(int64, tag = "2")]
        pub str: i64,
        #[prost(int64, tag = "3")]
        pub num: i64,
        #[prost(int64, tag = "4")]
        pub num_unit: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Mapping {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(uint64, tag = "2")]
        pub memory_start: u64,
        #[prost(uint64, tag = "3")]
        pub memory_limit: u64,
        #[prost(uint64, tag = "4")]
        pub file_offset: u64,
        #[prost(int64, tag = "5")]
        pub filename: i64,
        #[prost(int64, tag = "6")]
        pub build_id: i64,
        #[prost(bool, tag = "7")]
        pub has_functions: bool,
        #[prost(bool, tag = "8")]
        pub has_filenames: bool,
        #[prost(bool, tag = "9")]
        pub has_line_numbers: bool,
        #[prost(bool, tag = "10")]
        pub has_inline_frames: bool,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Location {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(uint64, tag = "2")]
        pub mapping_id: u64,
        #[prost(uint64, tag = "3")]
        pub address: u64,
        #[prost(message, repeated, tag = "4")]
        pub line: Vec<Line>,
        #[prost(bool, tag = "5")]
        pub is_folded: bool,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Line {
        #[prost(uint64, tag = "1")]
        pub function_id: u64,
        #[prost(int64, tag = "2")]
        pub line: i64,
        #[prost(int64, tag = "3")]
        pub column: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Function {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(int64, tag = "2")]
        pub name: i64,
        #[prost(int64, tag = "3")]
        pub system_name: i64,
        #[prost(int64, tag = "4")]
        pub filename: i64,
        #[prost(int64, tag = "5")]
        pub start_line: i64,
    }
}

use proto::{Function, Label, Line, Location, Mapping, Profile, Sample, ValueType};

/// The sample types, in the order of each sample's values.
pub const SAMPLE_TYPES: [(&str, &str); 3] = [
    ("idle", "nanoseconds"),
    ("gaps", "count"),
    ("cpu_samples", "count"),
];

/// What one sample is made of: the launch (stack, API, op), the CPU sample's stack under it (0
/// for the launch itself), and the labels.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Key {
    stack: StackId,
    api: NameId,
    op: NameId,
    cpu: StackId,
    cause: Category,
    reason: u8,
    device: u32,
    pid: u32,
}

/// The string table, functions and locations of the profile being built.
struct Tables<'a> {
    store: &'a Store,
    strings: Vec<String>,
    string_ids: HashMap<String, i64>,
    functions: Vec<Function>,
    function_ids: HashMap<(i64, i64), u64>,
    locations: Vec<Location>,
    location_ids: HashMap<NameId, u64>,
}

impl<'a> Tables<'a> {
    fn new(store: &'a Store) -> Self {
        Tables {
            store,
            // The format's first string is the empty one.
            strings: vec![String::new()],
            string_ids: HashMap::from([(String::new(), 0)]),
            functions: Vec::new(),
            function_ids: HashMap::new(),
            locations: Vec::new(),
            location_ids: HashMap::new(),
        }
    }

    fn string(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.string_ids.get(s) {
            return i;
        }
        let i = self.strings.len() as i64;
        self.strings.push(s.to_string());
        self.string_ids.insert(s.to_string(), i);
        i
    }

    fn function(&mut self, name: &str, system_name: &str, file: &str) -> u64 {
        let (name, file) = (self.string(name), self.string(file));
        if let Some(&id) = self.function_ids.get(&(name, file)) {
            return id;
        }
        let id = self.functions.len() as u64 + 1;
        let system_name = self.string(system_name);
        self.functions.push(Function {
            id,
            name,
            system_name,
            filename: file,
            start_line: 0,
        });
        self.function_ids.insert((name, file), id);
        id
    }

    /// The location of a frame: one per distinct frame text.
    fn location(&mut self, frame: NameId) -> u64 {
        if let Some(&id) = self.location_ids.get(&frame) {
            return id;
        }
        let text = self.store.names.get(frame);
        let store = self.store;
        let (function, line) = match store.names.frame(frame) {
            StackFrame::Python(p) if p.line().is_some() => {
                let (file, qual) = (p.file, p.function);
                // A system name unlike the name tells pprof the name is final: it leaves
                // `<module>` and `<lambda>` whole rather than strip them as C++ templates.
                let f = self.function(qual, &format!("{file}: {qual}"), file);
                (f, p.line().unwrap_or(0) as i64)
            }
            StackFrame::Native {
                binary,
                symbol: Some(sym),
                ..
            } => (self.function(sym, sym, binary), 0),
            _ => (self.function(text, text, ""), 0),
        };
        let id = self.locations.len() as u64 + 1;
        self.locations.push(Location {
            id,
            mapping_id: 1,
            address: 0,
            line: vec![Line {
                function_id: function,
                line,
                column: 0,
            }],
            is_folded: false,
        });
        self.location_ids.insert(frame, id);
        id
    }

    fn label(&mut self, key: &str, value: &str) -> Label {
        Label {
            key: self.string(key),
            str: self.string(value),
            num: 0,
            num_unit: 0,
        }
    }

    fn num_label(&mut self, key: &str, num: i64) -> Label {
        Label {
            key: self.string(key),
            str: 0,
            num,
            num_unit: 0,
        }
    }
}

const REASONS: [Reason; 5] = [
    Reason::Launch,
    Reason::Sync,
    Reason::EventWait,
    Reason::Graph,
    Reason::Unknown,
];

/// The profile of the window's gaps on `cfg`'s basis (see the module's docs); the window is
/// relative to the capture's start, as the report's.
pub fn profile(store: &Store, w: Window, cfg: &Config) -> Profile {
    let (span_lo, span_hi) = store.span().unwrap_or((0, 0));
    let w = Window {
        from: w.from.map(|f| f + span_lo),
        to: w.to.map(|t| t + span_lo),
    };
    // Values by sample: idle, gaps, CPU samples.
    let mut values: HashMap<Key, [i64; 3]> = HashMap::new();
    gaps::charged_gaps(store, w, cfg, |g| {
        let lane = &store.lanes[g.lane];
        let key = Key {
            stack: g.stack,
            api: g.api,
            op: g.op_name,
            cpu: 0,
            cause: g.category,
            reason: REASONS.iter().position(|&r| r == g.reason).unwrap_or(0) as u8,
            device: lane.key.device,
            pid: store.procs[lane.key.proc as usize].pid,
        };
        let d = g.dur();
        let samples = if store.cpu_samples > 0 {
            gaptop_core::analysis::oncpu::gap_samples(store, &g)
        } else {
            Vec::new()
        };
        let own = values.entry(key).or_default();
        own[1] += 1;
        if samples.is_empty() {
            own[0] += d;
        }
        // The gap's time shared among its samples in whole nanoseconds, the first samples
        // taking the remainder, so that the shares add up to the gap.
        let n = samples.len() as Ns;
        for (i, &s) in samples.iter().enumerate() {
            let v = values.entry(Key { cpu: s, ..key }).or_default();
            v[0] += d / n + Ns::from((i as Ns) < d % n);
            v[2] += 1;
        }
    });
    let mut t = Tables::new(store);
    let sample_type: Vec<ValueType> = SAMPLE_TYPES
        .iter()
        .map(|&(ty, unit)| ValueType {
            r#type: t.string(ty),
            unit: t.string(unit),
        })
        .collect();
    let mut keys: Vec<(Key, [i64; 3])> = values.into_iter().collect();
    // A fixed order, so that the same input writes the same bytes.
    keys.sort_by_key(|k| k.0);
    // Launch stacks that differ only in plumbing frames become one sample, as pprof would
    // merge them.
    type Merged = (Vec<u64>, Category, u8, u32, u32);
    let mut merged: Vec<(Merged, [i64; 3])> = Vec::new();
    let mut index: HashMap<Merged, usize> = HashMap::new();
    for (k, v) in keys {
        let mut path = store.stacks.frames(k.stack);
        if k.api != 0 {
            path.push(k.api);
        }
        path.push(k.op);
        if k.cpu != 0 {
            path.push(store.cpu_marker);
            path.extend(store.stacks.frames(k.cpu));
        }
        let locations: Vec<u64> = path
            .into_iter()
            .rev()
            .filter(|&f| !gaptop_core::frames::is_plumbing(store.names.get(f)))
            .map(|f| t.location(f))
            .collect();
        let m = (locations, k.cause, k.reason, k.device, k.pid);
        let i = *index.entry(m.clone()).or_insert_with(|| {
            merged.push((m, [0; 3]));
            merged.len() - 1
        });
        for (a, b) in merged[i].1.iter_mut().zip(v) {
            *a += b;
        }
    }
    // Heaviest first (a stable sort: ties keep the fixed order).
    merged.sort_by_key(|m| std::cmp::Reverse(m.1));
    let sample: Vec<Sample> = merged
        .into_iter()
        .map(|((location_id, cause, reason, device, pid), v)| Sample {
            location_id,
            value: v.to_vec(),
            label: vec![
                t.label("cause", cause.as_str()),
                t.label("reason", REASONS[reason as usize].as_str()),
                // A string: pprof leaves out numeric labels of 0.
                t.label("device", &format!("gpu{device}")),
                t.num_label("pid", pid as i64),
            ],
        })
        .collect();
    let lo = w.lo().max(span_lo);
    let hi = w.hi().min(span_hi).max(lo);
    let basis = match cfg.basis {
        gaps::Basis::Device => "device idle (no stream of the device running anything)",
        gaps::Basis::Stream => "each stream's own idle (HTA's)",
    };
    let comment = vec![
        t.string(&format!(
            "gaptop: GPU idle time by the launch stack of the op each gap ended at, {basis}"
        )),
        t.string(&format!("source: {}", store.source)),
    ];
    let mapping_file = t.string("gaptop");
    let default_sample_type = sample_type[0].r#type;
    Profile {
        period_type: Some(sample_type[0].clone()),
        period: 1,
        sample_type,
        sample,
        mapping: vec![Mapping {
            id: 1,
            filename: mapping_file,
            has_functions: true,
            has_filenames: true,
            has_line_numbers: true,
            ..Default::default()
        }],
        location: t.locations,
        function: t.functions,
        string_table: t.strings,
        time_nanos: lo,
        duration_nanos: hi - lo,
        comment,
        default_sample_type,
        ..Default::default()
    }
}

/// Profiles of the same sample types as one (several programs' windows, `gaptop serve`'s
/// `/debug/pprof/idle`): their samples with strings, functions and locations renumbered and
/// shared where equal; the earliest start and the span to the latest end. None for none.
pub fn merge<'a>(ps: impl IntoIterator<Item = &'a Profile>) -> Option<Profile> {
    let mut ps = ps.into_iter().peekable();
    let first = *ps.peek()?;
    let mut out = Profile {
        string_table: vec![String::new()],
        mapping: first.mapping.clone(),
        period: first.period,
        ..Default::default()
    };
    let mut strings: HashMap<String, i64> = HashMap::from([(String::new(), 0)]);
    let mut functions: HashMap<(i64, i64, i64, i64), u64> = HashMap::new();
    let mut locations: HashMap<Vec<(u64, i64)>, u64> = HashMap::new();
    let (mut lo, mut hi) = (i64::MAX, i64::MIN);
    for p in ps {
        let mut s = |i: i64| -> i64 {
            let text = p.string_table.get(i as usize).cloned().unwrap_or_default();
            let next = strings.len() as i64;
            *strings.entry(text.clone()).or_insert_with(|| {
                out.string_table.push(text);
                next
            })
        };
        let vt = |v: &ValueType, s: &mut dyn FnMut(i64) -> i64| ValueType {
            r#type: s(v.r#type),
            unit: s(v.unit),
        };
        if out.sample_type.is_empty() {
            for m in &mut out.mapping {
                m.filename = s(m.filename);
                m.build_id = s(m.build_id);
            }
            out.sample_type = p.sample_type.iter().map(|v| vt(v, &mut s)).collect();
            out.period_type = p.period_type.as_ref().map(|v| vt(v, &mut s));
            out.default_sample_type = s(p.default_sample_type);
            out.comment = p.comment.iter().map(|&c| s(c)).collect();
        }
        let mut fmap: HashMap<u64, u64> = HashMap::new();
        for f in &p.function {
            let key = (s(f.name), s(f.system_name), s(f.filename), f.start_line);
            let next = functions.len() as u64 + 1;
            let id = *functions.entry(key).or_insert_with(|| {
                out.function.push(Function {
                    id: next,
                    name: key.0,
                    system_name: key.1,
                    filename: key.2,
                    start_line: key.3,
                });
                next
            });
            fmap.insert(f.id, id);
        }
        let mut lmap: HashMap<u64, u64> = HashMap::new();
        for l in &p.location {
            let lines: Vec<(u64, i64)> = l
                .line
                .iter()
                .map(|x| (fmap.get(&x.function_id).copied().unwrap_or(0), x.line))
                .collect();
            let next = locations.len() as u64 + 1;
            let id = *locations.entry(lines.clone()).or_insert_with(|| {
                out.location.push(Location {
                    id: next,
                    mapping_id: l.mapping_id,
                    line: lines
                        .iter()
                        .map(|&(function_id, line)| Line {
                            function_id,
                            line,
                            column: 0,
                        })
                        .collect(),
                    ..Default::default()
                });
                next
            });
            lmap.insert(l.id, id);
        }
        for x in &p.sample {
            out.sample.push(Sample {
                location_id: x
                    .location_id
                    .iter()
                    .map(|i| lmap.get(i).copied().unwrap_or(0))
                    .collect(),
                value: x.value.clone(),
                label: x
                    .label
                    .iter()
                    .map(|l| Label {
                        key: s(l.key),
                        str: s(l.str),
                        num: l.num,
                        num_unit: s(l.num_unit),
                    })
                    .collect(),
            });
        }
        lo = lo.min(p.time_nanos);
        hi = hi.max(p.time_nanos + p.duration_nanos);
    }
    out.time_nanos = lo;
    out.duration_nanos = hi - lo;
    Some(out)
}

/// The profile encoded and gzipped, as pprof files are.
pub fn encode(p: &Profile) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    // Writing to a Vec cannot fail.
    let _ = gz.write_all(&prost::Message::encode_to_vec(p));
    gz.finish().unwrap_or_default()
}

/// A gzipped (or plain) profile read back.
pub fn decode(bytes: &[u8]) -> anyhow::Result<Profile> {
    let raw = if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(bytes), &mut v)?;
        v
    } else {
        bytes.to_vec()
    };
    Ok(prost::Message::decode(raw.as_slice())?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gaptop_core::model::records::{ApiCall, ApiKind, CpuSample, GpuOp, LaneKey, OpKind};

    /// Three kernels on one stream, with gaps of 100 and 30 ns; the second launched from
    /// `Model.forward` under `<module>`, with three CPU samples of its thread in its gap (two
    /// in `plan [libcudnn.so]`, one in `main`), the third from the same function through the
    /// nn.Module plumbing.
    fn store() -> Store {
        let mut st = Store::default();
        st.source = "hand-made".into();
        let p = st.add_process(7, -1, "t");
        let k = st.names.intern("k");
        let launch = st.names.intern("cudaLaunchKernel");
        let module = st.names.intern("main.py(3): <module>");
        let plumbing = st
            .names
            .intern("torch/nn/modules/module.py(1775): Module._call_impl");
        let forward = st.names.intern("model.py(12-13): Model.forward");
        let s_module = st.stacks.intern(0, module);
        let s_forward = st.stacks.intern(s_module, forward);
        let s_plumbing = st.stacks.intern(s_module, plumbing);
        let s_forward2 = st.stacks.intern(s_plumbing, forward);
        let main = st.names.intern("main");
        let plan = st.names.intern("plan [libcudnn.so]");
        let c_main = st.stacks.intern(0, main);
        let c_plan = st.stacks.intern(c_main, plan);
        let lane = st.lane_id(LaneKey {
            proc: p,
            device: 0,
            stream: 7,
        });
        for (i, (start, stack)) in [(0, s_forward), (110, s_forward), (150, s_forward2)]
            .into_iter()
            .enumerate()
        {
            let corr = i as u32 + 1;
            st.add_op(lane, GpuOp::new(start, start + 10, OpKind::Kernel, k, corr));
            st.add_api(
                p,
                ApiCall {
                    start: start - 5,
                    end: start - 3,
                    corr,
                    tid: 9,
                    name: launch,
                    stack,
                    kind: ApiKind::Launch,
                },
            );
        }
        let at = |time, stack| CpuSample { time, stack };
        st.add_samples(p, 9, &[at(20, c_plan), at(50, c_plan), at(80, c_main)]);
        st.finish_bulk();
        st
    }

    fn names(p: &Profile, s: &Sample) -> Vec<String> {
        s.location_id
            .iter()
            .map(|&l| {
                let f = p.location[l as usize - 1].line[0].function_id;
                p.string_table[p.function[f as usize - 1].name as usize].clone()
            })
            .collect()
    }

    #[test]
    fn gaps_become_samples_innermost_first_with_the_cpu_under_their_launch() {
        let st = store();
        let p = decode(&encode(&profile(&st, Window::all(), &Config::default()))).unwrap();
        let types: Vec<&str> = p
            .sample_type
            .iter()
            .map(|t| p.string_table[t.r#type as usize].as_str())
            .collect();
        assert_eq!(types, ["idle", "gaps", "cpu_samples"]);
        assert_eq!((p.time_nanos, p.duration_nanos), (0, 160));
        let got: Vec<(Vec<String>, Vec<i64>)> = p
            .sample
            .iter()
            .map(|s| (names(&p, s), s.value.clone()))
            .collect();
        let path = |extra: &[&str]| -> Vec<String> {
            let mut v: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
            v.extend(["k", "cudaLaunchKernel", "Model.forward", "<module>"].map(String::from));
            v
        };
        // Heaviest first: the 100 ns gap shared among its three samples (the first taking the
        // remainder), the gap itself counted on its launch; the 30 ns gap, whose stack differs
        // only in a plumbing frame, on the same launch path.
        let marker = gaptop_core::model::records::CPU_MARKER;
        assert_eq!(
            got,
            [
                (path(&["plan", "main", marker]), vec![67, 0, 2]),
                (path(&["main", marker]), vec![33, 0, 1]),
                (path(&[]), vec![30, 2, 0]),
            ]
        );
        // Python frames with their file and line, native ones with their library.
        let f = |name: &str| {
            p.function
                .iter()
                .find(|f| p.string_table[f.name as usize] == name)
                .unwrap()
        };
        assert_eq!(
            p.string_table[f("Model.forward").filename as usize],
            "model.py"
        );
        assert_eq!(p.string_table[f("plan").filename as usize], "libcudnn.so");
        let forward = p
            .location
            .iter()
            .find(|l| l.line[0].function_id == f("Model.forward").id)
            .unwrap();
        assert_eq!(forward.line[0].line, 12);
        let labels: Vec<(&str, &str, i64)> = p.sample[0]
            .label
            .iter()
            .map(|l| {
                let s = |i: i64| p.string_table[i as usize].as_str();
                (s(l.key), s(l.str), l.num)
            })
            .collect();
        assert_eq!(
            labels,
            [
                ("cause", "host_wait", 0),
                ("reason", "launch", 0),
                ("device", "gpu0", 0),
                ("pid", "", 7)
            ]
        );
    }

    #[test]
    fn a_window_holds_its_own_gaps() {
        let st = store();
        let w = Window {
            from: Some(125),
            to: None,
        };
        let p = profile(&st, w, &Config::default());
        let idle: i64 = p.sample.iter().map(|s| s.value[0]).sum();
        assert_eq!(idle, 25, "the 30 ns gap from 125 on");
        assert_eq!((p.time_nanos, p.duration_nanos), (125, 35));
        assert_eq!(p.sample.len(), 1);
    }
}
