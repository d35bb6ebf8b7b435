//! `anycloud`: the command-line tool and the API server. Everything is in the library
//! (`anycloud_cli`); this binary runs it with no test seams, so none can be turned on in it.

fn main() -> std::process::ExitCode {
    anycloud_cli::main(anycloud_cli::Seams::default())
}
