//! `gaptop-probe`: what one kernel launch and one stream sync cost the CPU on this machine,
//! for `gaptop record` and `gaptop run`, which run it before the program, bare and with the
//! collector injected (three times each); the difference is what gaptop adds to each of the
//! program's calls, which the replay takes out of its estimates (`core`'s `replay`).
//!
//! It launches an empty kernel (PTX, compiled by the driver) on the null stream in rounds of
//! `N` launches, each round timed without its sync, and times `N` syncs of the idle stream
//! between the rounds. It runs where the scheduler puts it, as the program does (pinned to one
//! CPU, it measured less than gaptop adds to a PyTorch launch: docs/perf.md). Prints
//! `PROBE launch_ns=L sync_ns=S rounds=R` (the median round's time a call), or one line on
//! stderr saying why it could not, and exits 2.
//!
//! usage: gaptop-probe [N] [ROUNDS]

use std::ffi::{c_void, CString};
use std::time::Instant;

use cudarc::driver::{result, sys};

/// An empty kernel; `.target sm_50` compiles for every GPU the driver runs.
const PTX: &str =
    ".version 7.0\n.target sm_50\n.address_size 64\n.visible .entry noop()\n{\n  ret;\n}\n\0";

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[(v.len() - 1) / 2]
}

fn probe(n: usize, rounds: usize) -> Result<(f64, f64), String> {
    // SAFETY: only looks the library up.
    if !unsafe { sys::is_culib_present() } {
        return Err("no CUDA driver library (libcuda.so.1)".into());
    }
    let e = |what: &str| {
        let what = what.to_string();
        move |err: result::DriverError| format!("{what}: {err:?}")
    };
    result::init().map_err(e("cuInit"))?;
    let dev = result::device::get(0).map_err(e("cuDeviceGet"))?;
    // SAFETY: `dev` came from device::get; the context, module and function are used on this
    // thread only, while they live (to the process's end); the kernel takes no parameters, so
    // an empty parameter list is its whole argument list; the null stream is always valid.
    unsafe {
        let ctx = result::primary_ctx::retain(dev).map_err(e("cuDevicePrimaryCtxRetain"))?;
        result::ctx::set_current(ctx).map_err(e("cuCtxSetCurrent"))?;
        let module = result::module::load_data(PTX.as_ptr() as *const c_void)
            .map_err(e("cuModuleLoadData"))?;
        let f = result::module::get_function(module, CString::new("noop").expect("no NUL"))
            .map_err(e("cuModuleGetFunction"))?;
        let stream: sys::CUstream = std::ptr::null_mut();
        let mut params: [*mut c_void; 0] = [];
        let mut launch = || -> Result<f64, String> {
            let t = Instant::now();
            for _ in 0..n {
                result::launch_kernel(f, (1, 1, 1), (1, 1, 1), 0, stream, &mut params)
                    .map_err(e("cuLaunchKernel"))?;
            }
            let ns = t.elapsed().as_nanos() as f64 / n as f64;
            result::ctx::synchronize().map_err(e("cuCtxSynchronize"))?;
            Ok(ns)
        };
        let sync = || -> Result<f64, String> {
            let t = Instant::now();
            for _ in 0..n {
                result::stream::synchronize(stream).map_err(e("cuStreamSynchronize"))?;
            }
            Ok(t.elapsed().as_nanos() as f64 / n as f64)
        };
        // Warm-up: the first launches load the module onto the GPU.
        launch()?;
        sync()?;
        let (mut l, mut s) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            l.push(launch()?);
            s.push(sync()?);
        }
        Ok((median(l), median(s)))
    }
}

fn main() {
    let arg = |i: usize, default: usize| {
        std::env::args()
            .nth(i)
            .and_then(|a| a.parse().ok())
            .filter(|&v| v > 0)
            .unwrap_or(default)
    };
    let (n, rounds) = (arg(1, 1000), arg(2, 30));
    match probe(n, rounds) {
        Ok((l, s)) => println!("PROBE launch_ns={l:.0} sync_ns={s:.0} rounds={rounds}"),
        Err(why) => {
            eprintln!("gaptop-probe: {why}");
            std::process::exit(2);
        }
    }
}
