//! The `rocmc` executable: the command line of `rocmc::cli`.

fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(rocmc::cli::main_with(std::env::args_os()))
}
