//! The collector's environment switches, read once. `gaptop run` and `record` set the ones a
//! user chooses (GAPTOP_SOCKET, GAPTOP_NATIVE); the others exist to measure the collector
//! (docs/perf.md) and keep their defaults otherwise.

use std::path::PathBuf;
use std::time::Duration;

use crate::limits::FLUSH_PERIOD;

/// How a flag reads: on unless set to "0".
fn on(get: &impl Fn(&str) -> Option<String>, key: &str) -> bool {
    get(key).is_none_or(|v| v != "0")
}

/// Exactly "1".
fn one(get: &impl Fn(&str) -> Option<String>, key: &str) -> bool {
    get(key).is_some_and(|v| v == "1")
}

fn number<T: std::str::FromStr>(get: &impl Fn(&str) -> Option<String>, key: &str) -> Option<T> {
    get(key).and_then(|v| v.trim().parse().ok())
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Switches {
    /// Python stacks at launches (GAPTOP_PYSTACKS=0 turns them off).
    pub py_stacks: bool,
    /// Native frames too (GAPTOP_NATIVE=1, from `--native`).
    pub native: bool,
    /// Say what is collected, time the callbacks and report at exit (GAPTOP_VERBOSE set).
    pub verbose: bool,
    /// API callbacks per domain, driver then runtime (GAPTOP_API=0 both off,
    /// GAPTOP_DRIVER_CB=0 / GAPTOP_RUNTIME_CB=0 one).
    pub domains: [bool; 2],
    /// Time the API calls with CUPTI's API records instead of callbacks, without stacks
    /// (GAPTOP_API_ACTIVITY: 1 call by call, 2 whole kinds then others off; 0 no).
    pub api_activity: u8,
    /// Callbacks only on the calls whose names start with these (GAPTOP_CB_ONLY=a,b).
    pub cb_only: Option<Vec<String>>,
    /// Callbacks return at once (GAPTOP_CB_NOOP=1).
    pub cb_noop: bool,
    /// Callbacks switched on only after this long (GAPTOP_CB_DELAY_MS).
    pub cb_delay: Option<Duration>,
    /// Callbacks on for the first and off for the second, repeatedly
    /// (GAPTOP_STACK_DUTY percent of GAPTOP_DUTY_PERIOD_MS, default 100 ms).
    pub duty: Option<(Duration, Duration)>,
    /// Hand CUPTI zeroed buffers (GAPTOP_ZEROED=0 lets CUPTI clear them).
    pub zeroed: bool,
    /// GPU record kinds taken, in `cupti::Activity::GPU` order: kernels, copies, memsets
    /// (GAPTOP_ACTIVITY=0: none; GAPTOP_MEM_ACTIVITY=0: kernels only).
    pub gpu_kinds: usize,
    /// CUPTI's synchronization records (GAPTOP_SYNC_ACTIVITY=1; off by default: on the H200
    /// they made a launch-bound program 1.49x slower instead of 1.21x, docs/perf.md).
    pub sync_activity: bool,
    /// Hardware kernel timestamps where CUPTI offers them (GAPTOP_HWTRACE=1).
    pub hwtrace: bool,
    /// NVTX ranges, from CUPTI's marker records (GAPTOP_NVTX=0 turns them off; `gaptop run`
    /// then does not point NVTX_INJECTION64_PATH at libcupti either).
    pub nvtx: bool,
    /// Forced flush period when buffers do not fill on their own (GAPTOP_FLUSH_MS; 0: never).
    pub flush: Option<Duration>,
    /// Raw CUPTI buffers written here, up to a byte budget (GAPTOP_DUMP, GAPTOP_DUMP_BYTES).
    pub dump: Option<(PathBuf, usize)>,
    /// CUPTI activity attributes set before tracing starts (GAPTOP_CUPTI_ATTRS=name=value,...),
    /// to measure whether CUPTI's own buffering moves the cost of kernel records.
    pub cupti_attrs: Vec<(CuptiAttr, usize)>,
    /// Names in GAPTOP_CUPTI_ATTRS that are not attributes, or values that are not numbers.
    pub bad_attrs: Vec<String>,
    /// Dormant (GAPTOP_DORMANT=1): a detach ends with `cuptiFinalize` (GAPTOP_DETACH=keep:
    /// callbacks off instead, still subscribed).
    pub detach_finalize: bool,
    /// The job's label in its control socket's name (GAPTOP_JOB; default: the program's).
    pub job: Option<String>,
}

/// The CUPTI activity attributes GAPTOP_CUPTI_ATTRS can set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CuptiAttr {
    /// Bytes of device memory per buffer of kernel, copy and memset timestamps (size_t).
    DeviceBuffer,
    /// Most such buffers per context (size_t).
    DeviceBufferPool,
    /// Buffers allocated when the context is created (size_t).
    DeviceBufferPrealloc,
    /// Timestamps in pinned host memory instead of device memory (uint8_t).
    HostPinned,
    /// CUPTI's activity buffers kept per thread (uint8_t).
    PerThread,
}

impl CuptiAttr {
    pub(crate) const ALL: [(&'static str, CuptiAttr); 5] = [
        ("device_buffer", CuptiAttr::DeviceBuffer),
        ("device_buffer_pool", CuptiAttr::DeviceBufferPool),
        ("device_buffer_prealloc", CuptiAttr::DeviceBufferPrealloc),
        ("host_pinned", CuptiAttr::HostPinned),
        ("per_thread", CuptiAttr::PerThread),
    ];

    pub(crate) fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, a)| *a == self)
            .map(|(n, _)| *n)
            .unwrap_or("?")
    }

    /// Whether CUPTI reads the value as a uint8_t (else as a size_t).
    pub(crate) fn is_flag(self) -> bool {
        matches!(self, CuptiAttr::HostPinned | CuptiAttr::PerThread)
    }
}

/// Reads `name=value,...` (`;` separates items too, for overhead.py's `--variant`, whose own
/// separator is the comma); sizes may end in k or m (KiB, MiB). What cannot be read is
/// returned apart, to be said once and left out.
pub(crate) fn cupti_attrs(v: &str) -> (Vec<(CuptiAttr, usize)>, Vec<String>) {
    let (mut good, mut bad) = (Vec::new(), Vec::new());
    for item in v.split([',', ';']).map(str::trim).filter(|s| !s.is_empty()) {
        let parsed = item.split_once('=').and_then(|(k, val)| {
            let attr = CuptiAttr::ALL
                .iter()
                .find(|(n, _)| *n == k.trim())
                .map(|(_, a)| *a)?;
            let val = val.trim().to_ascii_lowercase();
            let (digits, scale) = match val.strip_suffix('m') {
                Some(d) => (d, 1usize << 20),
                None => match val.strip_suffix('k') {
                    Some(d) => (d, 1 << 10),
                    None => (val.as_str(), 1),
                },
            };
            let n = digits.parse::<usize>().ok()?.checked_mul(scale)?;
            (!attr.is_flag() || n <= 1).then_some((attr, n))
        });
        match parsed {
            Some(p) => good.push(p),
            None => bad.push(item.to_string()),
        }
    }
    (good, bad)
}

impl Switches {
    pub(crate) fn from_env() -> Switches {
        Switches::read(|k| std::env::var(k).ok())
    }

    pub(crate) fn read(get: impl Fn(&str) -> Option<String>) -> Switches {
        let api = on(&get, "GAPTOP_API");
        let (cupti_attrs, bad_attrs) = cupti_attrs(&get("GAPTOP_CUPTI_ATTRS").unwrap_or_default());
        Switches {
            py_stacks: on(&get, "GAPTOP_PYSTACKS"),
            native: get("GAPTOP_NATIVE").is_some() && on(&get, "GAPTOP_NATIVE"),
            verbose: get("GAPTOP_VERBOSE").is_some(),
            domains: [
                api && on(&get, "GAPTOP_DRIVER_CB"),
                api && on(&get, "GAPTOP_RUNTIME_CB"),
            ],
            api_activity: number(&get, "GAPTOP_API_ACTIVITY").unwrap_or(0),
            cb_only: get("GAPTOP_CB_ONLY").map(|v| {
                v.split(',')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect()
            }),
            cb_noop: one(&get, "GAPTOP_CB_NOOP"),
            cb_delay: number(&get, "GAPTOP_CB_DELAY_MS").map(Duration::from_millis),
            duty: number(&get, "GAPTOP_STACK_DUTY").and_then(|pct| {
                let period = number(&get, "GAPTOP_DUTY_PERIOD_MS")
                    .filter(|&p| p > 0)
                    .unwrap_or(100);
                duty_windows(pct, period)
            }),
            zeroed: on(&get, "GAPTOP_ZEROED"),
            gpu_kinds: match (on(&get, "GAPTOP_ACTIVITY"), on(&get, "GAPTOP_MEM_ACTIVITY")) {
                (false, _) => 0,
                (true, true) => 3,
                (true, false) => 1,
            },
            sync_activity: on(&get, "GAPTOP_ACTIVITY") && one(&get, "GAPTOP_SYNC_ACTIVITY"),
            hwtrace: one(&get, "GAPTOP_HWTRACE"),
            nvtx: on(&get, "GAPTOP_NVTX"),
            flush: match number::<u64>(&get, "GAPTOP_FLUSH_MS") {
                Some(0) => None,
                Some(ms) => Some(Duration::from_millis(ms)),
                None => Some(FLUSH_PERIOD),
            },
            dump: get("GAPTOP_DUMP").map(|p| {
                (
                    PathBuf::from(p),
                    number(&get, "GAPTOP_DUMP_BYTES").unwrap_or(1 << 20),
                )
            }),
            cupti_attrs,
            bad_attrs,
            detach_finalize: get("GAPTOP_DETACH").is_none_or(|v| v != "keep"),
            job: get("GAPTOP_JOB").filter(|j| !j.is_empty()),
        }
    }
}

/// Callback windows for `pct` percent of every `period_ms`; None when that is always (or
/// never: 0 is not a duty).
pub(crate) fn duty_windows(pct: u64, period_ms: u64) -> Option<(Duration, Duration)> {
    if pct == 0 || pct >= 100 {
        return None;
    }
    let on = (period_ms * 1000 * pct / 100).max(1);
    let off = (period_ms * 1000 - on).max(1);
    Some((Duration::from_micros(on), Duration::from_micros(off)))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::path::PathBuf;
    use std::time::Duration;

    use super::{cupti_attrs, duty_windows, CuptiAttr, Switches};
    use crate::limits::FLUSH_PERIOD;

    fn with(pairs: &[(&str, &str)]) -> Switches {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Switches::read(|k| m.get(k).cloned())
    }

    #[test]
    fn defaults_collect_everything_with_python_stacks() {
        let s = with(&[]);
        assert!(s.py_stacks && !s.native && !s.verbose);
        assert_eq!(s.domains, [true, true]);
        assert_eq!(
            (s.api_activity, s.cb_only.clone(), s.cb_noop),
            (0, None, false)
        );
        assert_eq!((s.cb_delay, s.duty), (None, None));
        assert!(s.zeroed && !s.sync_activity && !s.hwtrace && s.nvtx);
        assert_eq!(s.gpu_kinds, 3);
        assert_eq!(s.flush, Some(FLUSH_PERIOD));
        assert_eq!(s.dump, None);
        assert!(s.cupti_attrs.is_empty() && s.bad_attrs.is_empty());
        assert!(s.detach_finalize && s.job.is_none());
    }

    #[test]
    fn cupti_attributes_read_with_their_units() {
        let s = with(&[(
            "GAPTOP_CUPTI_ATTRS",
            "device_buffer=32m, device_buffer_prealloc=6,host_pinned=1,per_thread=0,device_buffer_pool=4k",
        )]);
        assert_eq!(
            s.cupti_attrs,
            vec![
                (CuptiAttr::DeviceBuffer, 32 << 20),
                (CuptiAttr::DeviceBufferPrealloc, 6),
                (CuptiAttr::HostPinned, 1),
                (CuptiAttr::PerThread, 0),
                (CuptiAttr::DeviceBufferPool, 4096),
            ]
        );
        assert!(s.bad_attrs.is_empty());
        let (good, bad) =
            cupti_attrs("host_pinned=2,nosuch=1,device_buffer=lots,device_buffer,per_thread=1,");
        assert_eq!(good, vec![(CuptiAttr::PerThread, 1)]);
        assert_eq!(
            bad,
            [
                "host_pinned=2",
                "nosuch=1",
                "device_buffer=lots",
                "device_buffer"
            ]
        );
        assert_eq!(
            cupti_attrs(&format!("device_buffer={}m", usize::MAX))
                .1
                .len(),
            1
        );
        for (n, a) in CuptiAttr::ALL {
            assert_eq!(a.name(), n);
        }
    }

    #[test]
    fn switches_read_as_documented() {
        let s = with(&[
            ("GAPTOP_PYSTACKS", "0"),
            ("GAPTOP_NATIVE", "1"),
            ("GAPTOP_VERBOSE", ""),
            ("GAPTOP_DRIVER_CB", "0"),
            ("GAPTOP_API_ACTIVITY", "2"),
            ("GAPTOP_CB_ONLY", "cudaGetLastError, cuLaunch,"),
            ("GAPTOP_CB_NOOP", "1"),
            ("GAPTOP_CB_DELAY_MS", "1500"),
            ("GAPTOP_STACK_DUTY", "10"),
            ("GAPTOP_ZEROED", "0"),
            ("GAPTOP_MEM_ACTIVITY", "0"),
            ("GAPTOP_SYNC_ACTIVITY", "1"),
            ("GAPTOP_HWTRACE", "1"),
            ("GAPTOP_NVTX", "0"),
            ("GAPTOP_FLUSH_MS", "0"),
            ("GAPTOP_DUMP", "/tmp/x.buf"),
            ("GAPTOP_DUMP_BYTES", "4096"),
        ]);
        assert!(!s.py_stacks && s.native && s.verbose);
        assert_eq!(s.domains, [false, true]);
        assert_eq!(s.api_activity, 2);
        assert_eq!(
            s.cb_only,
            Some(vec!["cudaGetLastError".to_string(), "cuLaunch".to_string()])
        );
        assert!(s.cb_noop && !s.zeroed && s.sync_activity && s.hwtrace && !s.nvtx);
        assert_eq!(s.cb_delay, Some(Duration::from_millis(1500)));
        assert_eq!(
            s.duty,
            Some((Duration::from_millis(10), Duration::from_millis(90)))
        );
        assert_eq!((s.gpu_kinds, s.flush), (1, None));
        assert_eq!(s.dump, Some((PathBuf::from("/tmp/x.buf"), 4096)));
        let s = with(&[("GAPTOP_DETACH", "keep"), ("GAPTOP_JOB", "llama-eval")]);
        assert!(!s.detach_finalize);
        assert_eq!(s.job.as_deref(), Some("llama-eval"));
        assert!(with(&[("GAPTOP_DETACH", "finalize")]).detach_finalize);

        let s = with(&[
            ("GAPTOP_API", "0"),
            ("GAPTOP_ACTIVITY", "0"),
            ("GAPTOP_NATIVE", "0"),
            ("GAPTOP_SYNC_ACTIVITY", "1"),
        ]);
        assert_eq!(s.domains, [false, false]);
        assert_eq!(s.gpu_kinds, 0);
        assert!(!s.sync_activity, "no GPU records, no sync records");
        assert!(!s.native);
        let s = with(&[("GAPTOP_FLUSH_MS", "50"), ("GAPTOP_CB_NOOP", "yes")]);
        assert_eq!(s.flush, Some(Duration::from_millis(50)));
        assert!(!s.cb_noop, "only 1 switches it on");
    }

    #[test]
    fn duty_windows_split_the_period() {
        let ms = Duration::from_millis;
        assert_eq!(duty_windows(10, 100), Some((ms(10), ms(90))));
        assert_eq!(duty_windows(25, 200), Some((ms(50), ms(150))));
        assert_eq!(duty_windows(100, 100), None, "always on");
        assert_eq!(duty_windows(0, 100), None);
        let (on, off) = duty_windows(1, 1).unwrap();
        assert!(on > Duration::ZERO && off > Duration::ZERO);
    }
}
