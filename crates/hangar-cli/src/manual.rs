//! What an installed hangar ships about itself: shell completions (`hangar completions SHELL`)
//! and man pages (`hangar man DIR`, which `scripts/dist` runs), both generated from the one
//! command definition (`clap_complete`, `clap_mangen`), so they cannot drift from `--help`.

use std::path::Path;
use std::process::ExitCode;

use crate::exit::CliError;

/// Writes the completion script for `shell` to stdout.
pub fn completions(
    mut cmd: clap::Command,
    shell: clap_complete::Shell,
) -> Result<ExitCode, CliError> {
    let name = cmd.get_name().to_owned();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, name, &mut script);
    // A reader that stops early (`| head`) is not an error worth a word.
    let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), &script);
    Ok(ExitCode::SUCCESS)
}

/// Writes `hangar.1` and `hangar-COMMAND.1` (and `hangar-COMMAND-SUB.1`) for every visible
/// command into `dir`, which is made if missing.
pub fn man_pages(mut cmd: clap::Command, dir: &Path) -> Result<ExitCode, CliError> {
    std::fs::create_dir_all(dir)
        .map_err(|e| CliError::Failed(format!("{}: {e}", dir.display())))?;
    cmd.build();
    let mut written = 0usize;
    write_pages(&cmd, "hangar", dir, &mut written)?;
    crate::progress::say(&format!("{written} man pages in {}", dir.display()));
    Ok(ExitCode::SUCCESS)
}

fn write_pages(
    cmd: &clap::Command,
    name: &str,
    dir: &Path,
    written: &mut usize,
) -> Result<(), CliError> {
    let page = cmd
        .clone()
        .display_name(name.to_owned())
        .version(env!("CARGO_PKG_VERSION"));
    let mut out = Vec::new();
    clap_mangen::Man::new(page)
        .render(&mut out)
        .map_err(|e| CliError::Failed(format!("man page of {name}: {e}")))?;
    let path = dir.join(format!("{name}.1"));
    std::fs::write(&path, out).map_err(|e| CliError::Failed(format!("{}: {e}", path.display())))?;
    *written += 1;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        if sub.get_name() == "help" {
            continue;
        }
        write_pages(sub, &format!("{name}-{}", sub.get_name()), dir, written)?;
    }
    Ok(())
}
