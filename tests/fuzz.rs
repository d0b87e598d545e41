//! Mutation fuzzing of every parser on stable Rust: the Kineto/Chrome JSON importer, the
//! recording reader (old versions and GAPTOPR4) and the wire decoder get real inputs with bytes
//! flipped, cut, inserted and repeated. Each must answer Ok or a clean error, never panic or
//! hang. The deterministic damage cases (every cut, every flip) are in tests/damage.rs. The time per target is
//! GAPTOP_FUZZ_SECS (default 5); longer runs are recorded in docs/reliability.md.

use std::path::Path;
use std::time::{Duration, Instant};

use gaptop_core::model::store::Store;
use gaptop_core::sources::{kineto, recording};
use gaptop_wire as w;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn mutate(seed: &[u8], r: &mut Rng) -> Vec<u8> {
    let mut b = seed.to_vec();
    for _ in 0..1 + r.below(8) {
        if b.is_empty() {
            b.push(r.next() as u8);
        }
        let i = r.below(b.len());
        match r.below(7) {
            0 => b[i] = r.next() as u8,
            1 => b[i] ^= 1 << r.below(8),
            2 => b.truncate(i),
            3 => {
                let j = (i + r.below(64)).min(b.len());
                let chunk = b[i..j].to_vec();
                let at = r.below(b.len());
                b.splice(at..at, chunk);
            }
            4 => {
                let j = (i + 1 + r.below(32)).min(b.len());
                b.drain(i..j);
            }
            5 => {
                // JSON-structural bytes are the interesting ones for the splitter.
                let set = b"{}[]\",:\\0-e.";
                let c = set[r.below(set.len())];
                b.insert(i, c);
            }
            _ => {
                let v = (r.next() as u32).to_le_bytes();
                let end = (i + 4).min(b.len());
                b[i..end].copy_from_slice(&v[..end - i]);
            }
        }
    }
    b
}

fn secs() -> Duration {
    Duration::from_secs_f64(
        std::env::var("GAPTOP_FUZZ_SECS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(5.0),
    )
}

fn run(name: &str, seeds: &[Vec<u8>], mut target: impl FnMut(&[u8])) {
    let mut r = Rng(0x9e37_79b9_7f4a_7c15 ^ name.len() as u64);
    let t = Instant::now();
    let mut n = 0u64;
    while t.elapsed() < secs() {
        let s = &seeds[r.below(seeds.len())];
        let input = mutate(s, &mut r);
        let t0 = Instant::now();
        target(&input);
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "{name}: one input took {:?}",
            t0.elapsed()
        );
        n += 1;
    }
    eprintln!("fuzz {name}: {n} executions in {:?}, no panic", t.elapsed());
    assert!(n > 50, "{name}: too few executions ({n})");
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn fuzz_kineto_importer() {
    let mut seeds = vec![std::fs::read(root().join("tests/fixtures/multi_stream.json")).unwrap()];
    let trace = root().join("../shared/traces/kineto-launchbound.json.gz");
    if let Ok(f) = std::fs::File::open(trace) {
        let mut text = String::new();
        use std::io::Read;
        flate2::read::GzDecoder::new(f)
            .read_to_string(&mut text)
            .unwrap();
        seeds.push(text.as_bytes()[..200_000].to_vec());
    }
    // A trace with user annotations and gpu_user_annotations (HTA's test data).
    let mut text = Vec::new();
    use std::io::Read;
    flate2::read::GzDecoder::new(
        std::fs::File::open(root().join("tests/fixtures/hta_step_annotations.json.gz")).unwrap(),
    )
    .read_to_end(&mut text)
    .unwrap();
    seeds.push(text);
    // gaptop's own exports: several processes, their metadata and the window.
    for (rec, ms) in [
        ("assets/ddp2.rec", 40),
        ("tests/fixtures/multi_stream.json", 1),
    ] {
        let st = gaptop_core::sources::load_path(&root().join(rec), usize::MAX).unwrap();
        let (lo, hi) = st.span().unwrap();
        let mut out = Vec::new();
        let cfg = gaptop_core::analysis::gaps::Config::default();
        gaptop::export::write(&st, lo, hi.min(lo + ms * 1_000_000), &cfg, &mut out).unwrap();
        assert!(out.len() < 400_000, "{rec}: seed of {} bytes", out.len());
        seeds.push(out);
    }
    run("kineto", &seeds, |b| {
        let _ = kineto::load_reader(b, "fuzz", usize::MAX);
    });
}

#[test]
fn fuzz_recording_reader() {
    let planted = std::fs::read(root().join("assets/planted.rec")).unwrap();
    // The same frames as this gaptop writes them (GAPTOPR4, each frame checked).
    let mut r4 = Vec::new();
    {
        let mut r = recording::Reader::new(&planted[..]).unwrap();
        let mut w = recording::Writer::new(&mut r4).unwrap();
        while let Some((conn, f)) = r.next_entry().unwrap() {
            w.frame(conn, &f).unwrap();
        }
        w.flush().unwrap();
    }
    let seeds = vec![
        planted,
        r4,
        std::fs::read(root().join("tests/fixtures/fake_nvtx.rec")).unwrap(),
    ];
    run("recording", &seeds, |b| {
        let mut st = Store::new(64 << 20);
        let _ = recording::read_into(b, &mut st);
    });
}

#[test]
fn fuzz_wire_decoder() {
    let rec = std::fs::read(root().join("assets/planted.rec")).unwrap();
    // The recording without its magic and connection tags is a plain frame stream.
    let mut stream = Vec::new();
    let mut i = 8;
    while i + 8 <= rec.len() {
        let len = u32::from_le_bytes(rec[i + 4..i + 8].try_into().unwrap()) as usize;
        stream.extend_from_slice(&rec[i + 4..(i + 8 + len).min(rec.len())]);
        i += 8 + len;
    }
    let seeds = vec![stream[..stream.len().min(50_000)].to_vec()];
    let mut r = Rng(7);
    run("wire", &seeds, |b| {
        let mut d = w::Decoder::new();
        let mut at = 0;
        while at < b.len() {
            let k = (1 + r.below(4096)).min(b.len() - at);
            d.feed(&b[at..at + k]);
            at += k;
            while let Ok(Some(_)) = d.next_frame() {}
        }
    });
}
