//! What only the local (bubblewrap) provider promises, beyond the conformance suite: the host's
//! system is read-only, hangar's home and the host's daemons' sockets are out of sight, and root
//! inside keeps only the capabilities the driver needs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use hangar_sandbox::{CreateRequest, EnvSpec, ExecRequest, LocalProvider, Provider, Sandbox, Who};

async fn make(home: &Path, repo: &Path, yaml: &str) -> (LocalProvider, Sandbox) {
    let p = LocalProvider::new();
    let env = EnvSpec::from_yaml(yaml).unwrap();
    let sb = p
        .create(&CreateRequest {
            agent_uid: None,
            id: format!("local-{}", std::process::id()),
            env,
            repo: repo.to_owned(),
            person: "ada@example.com".into(),
            home: home.to_owned(),
        })
        .await
        .unwrap();
    (p, sb)
}

async fn sh(p: &LocalProvider, sb: &Sandbox, who: Who, script: &str) -> (i32, String) {
    let o = p
        .exec(sb, who, &ExecRequest::new(["sh", "-c", script]))
        .await
        .unwrap();
    let mut text = String::from_utf8_lossy(&o.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&o.stderr));
    (o.status, text.trim().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_is_read_only_and_hangars_things_are_out_of_sight() {
    // A home outside /tmp (the sandbox has its own /tmp, which would hide it anyway).
    let home = tempfile::tempdir_in("/var/tmp").unwrap();
    std::fs::write(home.path().join("vault.key"), "do not show").unwrap();
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("f"), "x").unwrap();
    let (p, sb) = make(home.path(), repo.path(), "name: l\nprovider: local\n").await;

    for who in [Who::Hangar, Who::Agent] {
        let (st, out) = sh(&p, &sb, who, &format!("ls -A {}", home.path().display())).await;
        assert_eq!((st, out.as_str()), (0, ""), "{who:?} sees hangar's home");
        let (st, _) = sh(
            &p,
            &sb,
            who,
            "touch /usr/hangar-test || touch /etc/hangar-test",
        )
        .await;
        assert_ne!(st, 0, "{who:?} wrote to the host's system");
        let (_, out) = sh(&p, &sb, who, "ls -A /run").await;
        assert_eq!(out, "hangar", "{who:?}: the host's /run shows");
    }
    assert!(!Path::new("/usr/hangar-test").exists());

    if sb.agent.is_some() {
        // Root inside cannot mount (no CAP_SYS_ADMIN) nor trace (no CAP_SYS_PTRACE).
        let (st, out) = sh(&p, &sb, Who::Hangar, "mount -t tmpfs x /mnt").await;
        assert_ne!(st, 0, "{out}");
        let (_, caps) = sh(&p, &sb, Who::Hangar, "grep CapEff /proc/self/status").await;
        let eff = u64::from_str_radix(caps.rsplit('\t').next().unwrap(), 16).unwrap();
        const SYS_ADMIN: u64 = 1 << 21;
        const SYS_PTRACE: u64 = 1 << 19;
        const SETUID: u64 = 1 << 7;
        assert_eq!(eff & (SYS_ADMIN | SYS_PTRACE), 0, "{caps}");
        assert_ne!(
            eff & SETUID,
            0,
            "the driver must be able to become the agent: {caps}"
        );
        let (_, caps) = sh(
            &p,
            &sb,
            Who::Agent,
            "grep -E 'Cap(Eff|Prm|Inh|Amb)' /proc/self/status",
        )
        .await;
        assert!(
            caps.lines().all(|l| l.ends_with("0000000000000000")),
            "the agent has capabilities: {caps}"
        );
        let (_, nnp) = sh(&p, &sb, Who::Agent, "grep NoNewPrivs /proc/self/status").await;
        assert!(nnp.ends_with('1'), "{nnp}");
    }
    p.destroy(&sb, false).await.unwrap();
    assert!(!sb.host_dir.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_home_inside_the_repo_is_not_copied_into_the_workspace() {
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("f"), "x").unwrap();
    let home = repo.path().join(".hangar");
    std::fs::create_dir(&home).unwrap();
    let (p, sb) = make(&home, repo.path(), "name: l\nprovider: local\n").await;
    let (st, out) = sh(&p, &sb, Who::Agent, "ls -A").await;
    assert_eq!((st, out.as_str()), (0, "f"));
    p.destroy(&sb, false).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capabilities_say_what_the_local_provider_can_do() {
    let p = LocalProvider::new();
    let on = EnvSpec::from_yaml("name: l\nprovider: local\n").unwrap();
    let off = EnvSpec::from_yaml("name: l\nprovider: local\nuid_split: false\n").unwrap();
    // SAFETY: geteuid has no arguments and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let c = p.capabilities(&on);
    assert_eq!(c.uid_split, root);
    assert_eq!(c.uid_split_off.is_some(), !root);
    assert!(!c.sudo);
    let c = p.capabilities(&off);
    assert!(!c.uid_split);
    assert!(c.uid_split_off.unwrap().contains("uid_split: false"));
    p.check(&on).await.unwrap();
    let docker = EnvSpec::from_yaml("name: d\nprovider: docker\nimage: i\n").unwrap();
    assert!(p.check(&docker).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_place_sandbox_works_on_the_folder_and_destroy_leaves_it() {
    let home = tempfile::tempdir_in("/var/tmp").unwrap();
    let repo = tempfile::tempdir_in("/var/tmp").unwrap();
    std::fs::write(repo.path().join("mine.txt"), "kept").unwrap();
    let (p, sb) = make(
        home.path(),
        repo.path(),
        "name: here\nprovider: local\nuid_split: false\nworkspace: in-place\n",
    )
    .await;
    assert_eq!(
        sb.host_workspace.as_deref(),
        Some(repo.path().canonicalize().unwrap().as_path())
    );
    // The agent sees the folder's own files at /workspace and its writes land in the folder.
    let (st, out) = sh(
        &p,
        &sb,
        Who::Agent,
        "cat /workspace/mine.txt && echo made > made.txt",
    )
    .await;
    assert_eq!((st, out.as_str()), (0, "kept"));
    assert_eq!(
        std::fs::read_to_string(repo.path().join("made.txt")).unwrap(),
        "made\n"
    );
    // No copy was made under the sandbox's folder.
    assert!(
        std::fs::symlink_metadata(sb.host_dir.join("workspace"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    p.destroy(&sb, false).await.unwrap();
    assert!(!sb.host_dir.exists(), "the sandbox's folder is gone");
    assert_eq!(
        std::fs::read_to_string(repo.path().join("mine.txt")).unwrap(),
        "kept",
        "destroy left the folder's files"
    );
    assert!(repo.path().join("made.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_place_sandbox_of_a_folder_holding_hangars_home_is_refused() {
    let repo = tempfile::tempdir_in("/var/tmp").unwrap();
    let home = repo.path().join(".hangar");
    std::fs::create_dir(&home).unwrap();
    let env =
        EnvSpec::from_yaml("name: here\nprovider: local\nuid_split: false\nworkspace: in-place\n")
            .unwrap();
    let err = LocalProvider::new()
        .create(&CreateRequest {
            agent_uid: None,
            id: format!("inplace-home-{}", std::process::id()),
            env,
            repo: repo.path().to_owned(),
            person: "ada@example.com".into(),
            home: home.clone(),
        })
        .await
        .unwrap_err();
    assert!(err.to_string().contains("is inside"), "{err}");
    // Nothing of the attempt is left in hangar's home.
    let left: Vec<_> = std::fs::read_dir(home.join("sandboxes"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
}

/// hangar's tools in a folder under /tmp (a checkout there): a folder given to `with_ro_binds`
/// is seen read-only at its own path although the sandbox has its own /tmp, and nothing else
/// of the host's /tmp shows. The folder hangar binds it in (`/tmp/<first>`) must be hangar's:
/// one the agent made first, or a link it planted there, is not used (the bind would follow
/// it), and `hidden` says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_under_tmp_are_seen_read_only_and_the_agent_cannot_move_them() {
    use std::os::unix::fs::PermissionsExt;
    let tools = tempfile::Builder::new()
        .prefix("hangar-bind-")
        .tempdir_in("/tmp")
        .unwrap();
    let pkg = tools.path().join("pkg");
    let bin = pkg.join("bin/tool");
    std::fs::create_dir_all(bin.parent().unwrap()).unwrap();
    std::fs::write(&bin, "#!/bin/sh\necho tool ran\n").unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(tools.path().join("beside"), "not for the sandbox").unwrap();
    let home = tempfile::tempdir_in("/var/tmp").unwrap();
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(repo.path().join("f"), "x").unwrap();
    let create = async |p: &LocalProvider, id: &str| {
        p.create(&CreateRequest {
            agent_uid: None,
            id: format!("{id}-{}", std::process::id()),
            env: EnvSpec::from_yaml("name: l\nprovider: local\n").unwrap(),
            repo: repo.path().to_owned(),
            person: "ada@example.com".into(),
            home: home.path().to_owned(),
        })
        .await
        .unwrap()
    };
    let p = LocalProvider::new().with_ro_binds(vec![pkg.clone()]);
    let sb = create(&p, "bind-a").await;
    let bin_s = bin.display().to_string();
    for who in [Who::Agent, Who::Hangar] {
        let (st, out) = sh(&p, &sb, who, &bin_s).await;
        assert_eq!((st, out.as_str()), (0, "tool ran"), "{who:?}");
        let (st, out) = sh(&p, &sb, who, &format!("touch {bin_s}")).await;
        assert_ne!(st, 0, "{who:?} changed the tool: {out}");
        let (st, out) = sh(
            &p,
            &sb,
            who,
            &format!("cat {}/beside", tools.path().display()),
        )
        .await;
        assert_ne!(st, 0, "{who:?} saw the rest of the host's /tmp: {out}");
        // The sandbox's own /tmp is still its own and writable.
        let (st, out) = sh(&p, &sb, who, "echo mine > /tmp/mine.$$ && cat /tmp/mine.$$").await;
        assert_eq!((st, out.as_str()), (0, "mine"), "{who:?}");
    }
    let (_, out) = sh(&p, &sb, Who::Hangar, &format!("touch {bin_s}")).await;
    assert!(out.contains("Read-only file system"), "{out}");
    assert_eq!(p.hidden(&sb, &bin), None);

    if sb.agent.is_some() {
        // The agent of another sandbox makes /tmp/<first> before hangar binds anything there.
        let plain = LocalProvider::new();
        let sb2 = create(&plain, "bind-b").await;
        let first = Path::new("/tmp").join(tools.path().file_name().unwrap());
        let first_s = first.display().to_string();
        let (st, out) = sh(&plain, &sb2, Who::Agent, &format!("mkdir {first_s}")).await;
        assert_eq!(st, 0, "{out}");
        let (st, _) = sh(&p, &sb2, Who::Agent, &bin_s).await;
        assert_ne!(st, 0, "the tool was bound into the agent's own folder");
        let why = p.hidden(&sb2, &bin).unwrap();
        assert!(why.contains(&format!("{first_s} belongs to uid")), "{why}");
        // A link in its place: not followed, and the commands still run.
        let (st, out) = sh(
            &plain,
            &sb2,
            Who::Agent,
            &format!("rmdir {first_s} && ln -s /workspace {first_s}"),
        )
        .await;
        assert_eq!(st, 0, "{out}");
        let (st, out) = sh(&p, &sb2, Who::Hangar, "ls /workspace").await;
        assert_eq!(
            (st, out.as_str()),
            (0, "f"),
            "something was made through the link"
        );
        let why = p.hidden(&sb2, &bin).unwrap();
        assert!(why.contains("is not a folder"), "{why}");
        p.destroy(&sb2, false).await.unwrap();
    }
    p.destroy(&sb, false).await.unwrap();
    assert!(!sb.host_dir.exists());
}

/// A harness CLI bind never shows hangar's hidden home again: not one equal to (or inside) the
/// home (a plain binary kept directly in `$HANGAR_HOME`), nor one above it under the sandbox's
/// own /tmp (tools in `/tmp/x`, the home in `/tmp/x/hangar`). `hidden` names the path and why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bind_inside_or_above_hangars_home_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let repo = tempfile::tempdir_in("/var/tmp").unwrap();
    std::fs::write(repo.path().join("f"), "x").unwrap();
    let under_tmp = tempfile::Builder::new()
        .prefix("hangar-above-")
        .tempdir_in("/tmp")
        .unwrap();
    let plain = tempfile::tempdir_in("/var/tmp").unwrap();
    let cases = [
        // (the folder bound, hangar's home)
        (plain.path().to_owned(), plain.path().to_owned()),
        (under_tmp.path().to_owned(), under_tmp.path().join("hangar")),
    ];
    for (i, (tools, home)) in cases.iter().enumerate() {
        std::fs::create_dir_all(home).unwrap();
        std::fs::write(home.join("vault.key"), "secret").unwrap();
        let bin = tools.join("claude");
        std::fs::write(&bin, "#!/bin/sh\necho tool ran\n").unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        let p = LocalProvider::new().with_ro_binds(vec![tools.clone()]);
        let sb = p
            .create(&CreateRequest {
                agent_uid: None,
                id: format!("home-bind-{i}-{}", std::process::id()),
                env: EnvSpec::from_yaml("name: l\nprovider: local\n").unwrap(),
                repo: repo.path().to_owned(),
                person: "ada@example.com".into(),
                home: home.clone(),
            })
            .await
            .unwrap();
        let key = home.join("vault.key").display().to_string();
        for who in [Who::Agent, Who::Hangar] {
            let (st, out) = sh(&p, &sb, who, &format!("cat {key}")).await;
            assert_ne!(st, 0, "case {i}: {who:?} read hangar's vault key: {out}");
            let (st, out) = sh(&p, &sb, who, "ls /workspace").await;
            assert_eq!((st, out.as_str()), (0, "f"), "case {i}: {who:?}");
        }
        let why = p.hidden(&sb, &bin).unwrap();
        let real = std::fs::canonicalize(tools).unwrap();
        assert!(why.contains(&real.display().to_string()), "{why}");
        assert!(why.contains("hangar's home"), "{why}");
        assert!(why.contains("install the harness CLI elsewhere"), "{why}");
        p.destroy(&sb, false).await.unwrap();
    }
}
