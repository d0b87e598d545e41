//! Which physical GPU a program's CUDA device is, for the `UUID` label the DCGM exporter puts on
//! its series (so that gaptop's and DCGM's series of one GPU join in a query).
//!
//! CUPTI's records name the CUDA device ordinal, which is the program's own numbering: CUDA
//! counts the GPUs fastest first (`CUDA_DEVICE_ORDER=FASTEST_FIRST`, the default, ties in PCI
//! bus order) or in PCI bus order (`PCI_BUS_ID`), then keeps those `CUDA_VISIBLE_DEVICES`
//! lists (indices in that numbering, or `GPU-` UUIDs or unique prefixes of them), in its order.
//! `nvidia-smi` gives each GPU's UUID, name and PCI bus id. Where the numbering cannot be known
//! from these (GPUs of different models under FASTEST_FIRST, MIG instances) no UUID is given
//! rather than a wrong one.

use std::collections::HashMap;
use std::sync::Mutex;

/// One GPU as nvidia-smi lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gpu {
    pub uuid: String,
    pub name: String,
    pub bus: String,
}

/// The machine's GPUs, and the UUIDs found so far by (pid, ordinal).
#[derive(Debug, Default)]
pub struct Gpus {
    gpus: Vec<Gpu>,
    found: Mutex<HashMap<(u32, u32), Option<String>>>,
}

/// Parses `nvidia-smi --query-gpu=uuid,name,pci.bus_id --format=csv,noheader`.
pub fn parse(text: &str) -> Vec<Gpu> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').map(str::trim).collect();
            match f.as_slice() {
                [uuid, name, bus] if uuid.starts_with("GPU-") => Some(Gpu {
                    uuid: uuid.to_string(),
                    name: name.to_string(),
                    bus: bus.to_ascii_lowercase(),
                }),
                _ => None,
            }
        })
        .collect()
}

/// The UUID of CUDA device `ordinal` of a program whose environment holds `visible`
/// (`CUDA_VISIBLE_DEVICES`) and `order` (`CUDA_DEVICE_ORDER`), on a machine with `gpus`.
pub fn uuid_of(
    gpus: &[Gpu],
    visible: Option<&str>,
    order: Option<&str>,
    ordinal: u32,
) -> Option<String> {
    let mut all: Vec<&Gpu> = gpus.iter().collect();
    all.sort_by(|a, b| a.bus.cmp(&b.bus));
    let pci_order = order == Some("PCI_BUS_ID");
    if !pci_order && all.windows(2).any(|w| w[0].name != w[1].name) {
        // Fastest first among different models: an order nvidia-smi does not show.
        return None;
    }
    let seen: Vec<&Gpu> = match visible {
        None => all,
        Some(v) => {
            let mut seen = Vec::new();
            for entry in v.split(',').map(str::trim) {
                // CUDA stops at the first entry it cannot use.
                let gpu = if let Ok(i) = entry.parse::<usize>() {
                    all.get(i).copied()
                } else if entry.starts_with("GPU-") {
                    let m: Vec<&&Gpu> = all.iter().filter(|g| g.uuid.starts_with(entry)).collect();
                    match m.as_slice() {
                        [one] => Some(**one),
                        _ => None,
                    }
                } else {
                    // MIG instances and anything else: not a whole GPU nvidia-smi names.
                    return None;
                };
                match gpu {
                    Some(g) if !seen.contains(&g) => seen.push(g),
                    _ => break,
                }
            }
            seen
        }
    };
    seen.get(ordinal as usize).map(|g| g.uuid.clone())
}

impl Gpus {
    /// Asks nvidia-smi (none without it: the series then carry no UUID).
    pub fn query() -> Gpus {
        let out = std::process::Command::new("nvidia-smi")
            .args(["--query-gpu=uuid,name,pci.bus_id", "--format=csv,noheader"])
            .stderr(std::process::Stdio::null())
            .output();
        let gpus = match out {
            Ok(o) if o.status.success() => parse(&String::from_utf8_lossy(&o.stdout)),
            _ => Vec::new(),
        };
        Gpus {
            gpus,
            found: Mutex::new(HashMap::new()),
        }
    }

    /// The UUID of device `ordinal` of process `pid` (from its environment), or "" when it
    /// cannot be known.
    pub fn uuid(&self, pid: u32, ordinal: u32) -> String {
        if self.gpus.is_empty() {
            return String::new();
        }
        let mut found = self.found.lock().unwrap_or_else(|e| e.into_inner());
        found
            .entry((pid, ordinal))
            .or_insert_with(|| {
                let env = environ(pid);
                let var = |k: &str| env.get(k).map(String::as_str);
                uuid_of(
                    &self.gpus,
                    var("CUDA_VISIBLE_DEVICES"),
                    var("CUDA_DEVICE_ORDER"),
                    ordinal,
                )
            })
            .clone()
            .unwrap_or_default()
    }
}

/// The environment a process started with (empty when it cannot be read).
fn environ(pid: u32) -> HashMap<String, String> {
    let raw = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    raw.split(|&b| b == 0)
        .filter_map(|kv| {
            let kv = String::from_utf8_lossy(kv);
            let (k, v) = kv.split_once('=')?;
            Some((k.to_string(), v.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMI: &str = "GPU-bbbb-2, NVIDIA H200, 00000000:1B:00.0\n\
                       GPU-aaaa-1, NVIDIA H200, 00000000:0A:00.0\n\
                       GPU-cccc-3, NVIDIA H200, 00000000:2C:00.0\n";

    #[test]
    fn ordinals_follow_the_bus_order_and_the_visible_list() {
        let g = parse(SMI);
        assert_eq!(g.len(), 3);
        let u = |v: Option<&str>, o: Option<&str>, i| uuid_of(&g, v, o, i);
        assert_eq!(u(None, None, 0).as_deref(), Some("GPU-aaaa-1"));
        assert_eq!(u(None, None, 2).as_deref(), Some("GPU-cccc-3"));
        assert_eq!(u(None, None, 3), None);
        // The visible list renumbers, in its own order; UUID prefixes name GPUs too.
        assert_eq!(u(Some("2,0"), None, 0).as_deref(), Some("GPU-cccc-3"));
        assert_eq!(u(Some("2,0"), None, 1).as_deref(), Some("GPU-aaaa-1"));
        assert_eq!(u(Some("GPU-bbbb"), None, 0).as_deref(), Some("GPU-bbbb-2"));
        // CUDA stops at an entry it cannot use; an ambiguous prefix or a MIG id gives none.
        assert_eq!(u(Some("1,7,2"), None, 1), None);
        assert_eq!(u(Some("GPU-"), None, 0), None);
        assert_eq!(u(Some("MIG-1234"), None, 0), None);
        assert_eq!(u(Some(""), None, 0), None);
    }

    #[test]
    fn mixed_models_are_known_only_in_bus_order() {
        let mut g = parse(SMI);
        g[0].name = "NVIDIA L4".into();
        assert_eq!(uuid_of(&g, None, None, 0), None);
        assert_eq!(
            uuid_of(&g, Some("1"), Some("PCI_BUS_ID"), 0).as_deref(),
            Some("GPU-bbbb-2")
        );
    }
}
