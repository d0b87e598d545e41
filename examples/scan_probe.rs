//! Where import time goes: the splitter alone, then splitter plus serde, on one file.
//! cargo run --release --example scan_probe -- FILE
use gaptop_core::sources::jsonscan::Scanner;
use std::time::Instant;
fn main() {
    let p = std::env::args().nth(1).expect("FILE");
    let t = Instant::now();
    let n = Scanner::new(std::fs::File::open(&p).unwrap())
        .for_each_event(|_, _| Ok(()))
        .unwrap();
    let split = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut b = gaptop_core::sources::kineto::Builder::new(usize::MAX, "probe");
    Scanner::new(std::fs::File::open(&p).unwrap())
        .for_each_event(|e, _| b.event(e))
        .unwrap();
    let parse = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let st = b.finish();
    let fin = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let _ = gaptop::report::build(&st, Default::default(), &Default::default(), 10, None);
    let rep = t.elapsed().as_secs_f64();
    let mb = std::fs::metadata(&p).unwrap().len() as f64 / 1e6;
    println!("{n} events, {mb:.0} MB: split {split:.2}s ({:.0} MB/s), split+parse {parse:.2}s ({:.0} MB/s), finish {fin:.2}s, report {rep:.2}s", mb / split, mb / parse);
}
