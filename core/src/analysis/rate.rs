//! The launch rate and busy fraction over time: the header's sparkline, in bins of a window.

use crate::model::records::Ns;
use crate::model::store::Store;

/// Launch rate and busy fraction over time.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RateBin {
    pub start: Ns,
    pub ops: u64,
    /// Busy fraction of the busiest device in the bin, 0..1.
    pub busy: f64,
}

/// Splits [lo, hi) into `n` bins and counts ops started and busy time in each. Costs
/// O(n · lanes · log ops).
pub fn rate_bins(store: &Store, lo: Ns, hi: Ns, n: usize) -> Vec<RateBin> {
    if n == 0 || hi <= lo {
        return Vec::new();
    }
    let width = ((hi - lo) as f64 / n as f64).max(1.0);
    let devices = store.devices();
    (0..n)
        .map(|i| {
            let a = lo + (i as f64 * width) as Ns;
            let b = lo + ((i + 1) as f64 * width) as Ns;
            let mut ops = 0;
            let mut busy = 0f64;
            for (_, lanes) in &devices {
                let mut dev_busy = 0;
                for &l in lanes {
                    let lane = &store.lanes[l];
                    ops += (lane.lower_bound(b) - lane.lower_bound(a)) as u64;
                    dev_busy += lane.busy_in(a, b);
                }
                busy = busy.max((dev_busy as f64 / (b - a).max(1) as f64).min(1.0));
            }
            RateBin {
                start: a,
                ops,
                busy,
            }
        })
        .collect()
}
