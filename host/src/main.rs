//! The `cradle` binary: a thin shell over [`cradle::cli`].

fn main() -> std::process::ExitCode {
    cradle::cli::main()
}
