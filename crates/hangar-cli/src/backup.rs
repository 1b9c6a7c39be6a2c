//! `hangar backup FILE` and `hangar restore FILE`: the store's consistent online copy, and
//! bringing one back.
//!
//! The copy is the database alone (`Store::backup_to`: SQLite's `VACUUM INTO`; PostgreSQL's
//! `pg_dump` is named instead). Two things are not in it, and the commands say so: the vault's
//! master key, which must be kept apart from the copy (a copy and its key together are every
//! credential in the clear), and the run logs and trees under `$HANGAR_HOME/runs`, plain files
//! to copy with the tools people already use.
//!
//! `restore` never overwrites: the store it replaces is moved aside, named with the time. It
//! refuses while a server answers for this home, and checks the copy (it opens, its audit log's
//! hash chain holds) before it takes its place.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::exit::CliError;
use crate::progress;
use crate::serve::{Plane, runtime};

fn fail(e: hangar_store::StoreError) -> CliError {
    match e {
        hangar_store::StoreError::Invalid(m) => CliError::Usage(m),
        e => CliError::Failed(e.to_string()),
    }
}

/// `hangar backup FILE`.
pub fn backup(home: &Path, file: &Path) -> Result<ExitCode, CliError> {
    if file.exists() {
        return Err(CliError::Usage(format!(
            "{} exists: give a new file (a backup never overwrites)",
            file.display()
        )));
    }
    let settings = Plane::from_env(home);
    if let Some(db) = settings.database.strip_prefix("sqlite://")
        && !Path::new(db).is_file()
    {
        return Err(CliError::Usage(format!(
            "no store at {db}: is HANGAR_HOME (or HANGAR_CONFIG) the server's?"
        )));
    }
    let file = std::path::absolute(file).map_err(|e| CliError::Failed(e.to_string()))?;
    runtime()?.block_on(async {
        let store = hangar_store::Store::open(&settings.database)
            .await
            .map_err(fail)?;
        let result = store.backup_to(&file).await.map_err(fail);
        store.close().await;
        result
    })?;
    let size = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
    progress::say(&format!(
        "backup: {} ({} bytes), the store as of one moment",
        file.display(),
        progress::thousands(size)
    ));
    progress::say(&format!(
        "not in it: the vault's master key {}: keep a copy of it apart from the backup (a secrets manager, another medium); without it the backup's credentials cannot be read, and with it beside the backup anyone holding both reads them",
        settings.master_key.display()
    ));
    progress::say(&format!(
        "not in it: run logs and trees under {}: copy that folder too (rsync, tar)",
        home.join("runs").display()
    ));
    Ok(ExitCode::SUCCESS)
}

/// `hangar restore FILE`.
pub fn restore(home: &Path, file: &Path) -> Result<ExitCode, CliError> {
    let settings = Plane::from_env(home);
    let Some(target) = settings
        .database
        .strip_prefix("sqlite://")
        .map(PathBuf::from)
    else {
        return Err(CliError::Usage(
            "this store is on PostgreSQL: bring a pg_dump back with pg_restore".into(),
        ));
    };
    if !file.is_file() {
        return Err(CliError::Usage(format!("{}: no such file", file.display())));
    }
    if let Some(url) = serving() {
        return Err(CliError::Usage(format!(
            "a server answers at {url}: stop it first (systemctl stop hangar), then restore"
        )));
    }
    // A server using this home, wherever it listens (or `hangar run`'s), holds its lock.
    let _alone = if home.is_dir() {
        Some(lock(home, libc::LOCK_EX).ok_or_else(|| {
            CliError::Usage(format!(
                "a server (hangar serve, or a hangar run) is using the store in {}: stop it first, then restore",
                home.display()
            ))
        })?)
    } else {
        None
    };
    if !settings.master_key.is_file() {
        return Err(CliError::Usage(format!(
            "no master key at {}: put the key kept with this backup there first (HANGAR_MASTER_KEY_FILE names another place)",
            settings.master_key.display()
        )));
    }
    let dir = target.parent().unwrap_or(Path::new("."));
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| CliError::Failed(format!("{}: {e}", dir.display())))?;
    }
    let staged = dir.join("hangar.db.restoring");
    let _ = std::fs::remove_file(&staged);
    std::fs::copy(file, &staged)
        .map_err(|e| CliError::Failed(format!("cannot copy {}: {e}", file.display())))?;
    // The store is its owner's alone, whatever mode the copy had.
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| CliError::Failed(format!("{}: {e}", staged.display())))?;
    }
    let checked = runtime()?.block_on(async {
        let store = hangar_store::Store::open(&format!("sqlite://{}", staged.display()))
            .await
            .map_err(|e| {
                CliError::Failed(format!("{} is not a hangar store: {e}", file.display()))
            })?;
        let store = store
            .with_vault(
                hangar_store::Vault::open_or_create(&settings.master_key)
                    .map_err(|e| CliError::Failed(e.to_string()))?,
            )
            .await
            .map_err(|e| {
                CliError::Failed(format!(
                    "the backup and the master key do not belong together: {e}"
                ))
            })?;
        let n = store
            .audit()
            .verify()
            .await
            .map_err(|e| CliError::Failed(format!("the backup's audit log is broken: {e}")))?;
        store.close().await;
        Ok::<u64, CliError>(n)
    });
    let records = match checked {
        Ok(n) => n,
        Err(e) => {
            let _ = std::fs::remove_file(&staged);
            return Err(e);
        }
    };
    if target.exists() {
        let aside = dir.join(format!(
            "hangar.db.before-restore-{}",
            hangar_store::now_ms()
        ));
        std::fs::rename(&target, &aside).map_err(|e| {
            CliError::Failed(format!("cannot move {} aside: {e}", target.display()))
        })?;
        for ext in ["-wal", "-shm"] {
            let side = PathBuf::from(format!("{}{ext}", target.display()));
            if side.exists() {
                let _ = std::fs::rename(&side, format!("{}{ext}", aside.display()));
            }
        }
        progress::say(&format!("the store it replaces: {}", aside.display()));
    }
    for ext in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{ext}", staged.display()));
    }
    std::fs::rename(&staged, &target)
        .map_err(|e| CliError::Failed(format!("cannot put the copy in place: {e}")))?;
    progress::say(&format!(
        "restored: {} from {} (audit log intact: {records} records)",
        target.display(),
        file.display()
    ));
    Ok(ExitCode::SUCCESS)
}

/// The server this home's commands would talk to, if one answers.
fn serving() -> Option<String> {
    let url = crate::api::url_from_env();
    let addr = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))?
        .split('/')
        .next()?
        .to_owned();
    use std::net::ToSocketAddrs;
    let sock = addr.to_socket_addrs().ok()?.next()?;
    std::net::TcpStream::connect_timeout(&sock, std::time::Duration::from_millis(500))
        .ok()
        .map(|_| url)
}

/// An age: a number and `d`, `h` or `m` (`90d`).
pub fn age(text: &str) -> Result<std::time::Duration, CliError> {
    let bad = || {
        CliError::Usage(format!(
            "--older-than {text:?}: give a number and d, h or m (like 90d, 12h, 30m)"
        ))
    };
    let (n, secs) = [("d", 86_400u64), ("h", 3_600), ("m", 60)]
        .iter()
        .find_map(|(unit, secs)| text.strip_suffix(unit).map(|n| (n, *secs)))
        .ok_or_else(bad)?;
    let n: u64 = n.parse().map_err(|_| bad())?;
    if n == 0 {
        return Err(bad());
    }
    Ok(std::time::Duration::from_secs(n.saturating_mul(secs)))
}

/// `hangar prune --older-than AGE [--dry-run]`: retention, once, on this machine's store.
pub fn prune(home: &Path, older_than: &str, dry_run: bool) -> Result<ExitCode, CliError> {
    let older_than = age(older_than)?;
    let home_owned = home.to_path_buf();
    crate::people::on_store(home, |store| async move {
        let p = hangar_control::retention::prune(
            &store,
            &home_owned,
            older_than,
            dry_run,
            &crate::local::local_person(),
        )
        .await
        .map_err(|e| CliError::Failed(e.to_string()))?;
        progress::say(&format!(
            "{} {} run{} ({} events), {} session conversation{}, {} bytes of files",
            if dry_run { "would prune" } else { "pruned" },
            p.runs,
            if p.runs == 1 { "" } else { "s" },
            p.events,
            p.conversations,
            if p.conversations == 1 { "" } else { "s" },
            progress::thousands(p.bytes)
        ));
        Ok(ExitCode::SUCCESS)
    })
}

/// The file a server using a home holds a shared lock on for as long as it runs (`hangar
/// serve`, the server `hangar run` embeds); `hangar restore` needs it alone.
const IN_USE: &str = "serve.lock";

/// Marks `home`'s store as in use by this process until it exits.
pub fn hold_in_use(home: &Path) {
    static HELD: std::sync::Mutex<Vec<std::fs::File>> = std::sync::Mutex::new(Vec::new());
    if let Some(f) = lock(home, libc::LOCK_SH)
        && let Ok(mut held) = HELD.lock()
    {
        held.push(f);
    }
}

/// The lock file of `home` locked as `how` (without waiting), or `None` when another process
/// holds it the other way (or it cannot be opened).
fn lock(home: &Path, how: libc::c_int) -> Option<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::io::AsRawFd;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(home.join(IN_USE))
        .ok()?;
    // SAFETY: flock on a descriptor this function owns; no memory is passed.
    let r = unsafe { libc::flock(f.as_raw_fd(), how | libc::LOCK_NB) };
    (r == 0).then_some(f)
}
