//! ringfs as a library: what `ringfs exec` does, for Rust callers (an
//! agent runtime) that want the receipt without spawning the CLI.
//!
//! - [`exec`]: [`exec::exec`] runs one command in a mounted workspace and
//!   returns its [`exec::Receipt`]; [`exec::answer`] is the daemon's side;
//! - [`sandbox`]: the namespaces `--sandbox` runs it in;
//! - [`control`]: the control socket the CLI and the daemon talk over;
//! - [`errors`]: the error document every `--json` command prints when it fails.
//!
//! The rest of the command line lives in the `ringfs` binary (src/main.rs).

pub mod control;
pub mod errors;
pub mod exec;
pub mod exec_cli;
pub mod exec_sync;
mod run;
pub mod sandbox;

pub use exec::{exec, ExecOptions, Receipt};
pub use run::NotRun;
