//! The `gaptop` binary: everything it does is the library's command line ([`gaptop::cli`]).

fn main() -> std::process::ExitCode {
    gaptop::cli::main()
}
