//! Registries on 127.0.0.1 for the image-pull tests (also used by hangar-cli's, through
//! `#[path]`): the open one `scripts/start-registry` runs (`HANGAR_TEST_REGISTRY`), and a private
//! one a test starts that takes only a login (htpasswd, [`USER`] / [`PASSWORD`]), both Debian's
//! docker-registry. dockerd speaks plain HTTP to registries on 127.0.0.0/8. Nothing here reaches
//! further than loopback.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers"
)]

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::auth::DockerCredentials;
use bollard::query_parameters::{PushImageOptionsBuilder, TagImageOptionsBuilder};
use futures_util::StreamExt;

/// The login the private registry takes.
pub const USER: &str = "hangar";
pub const PASSWORD: &str = "hangar-pull-secret";
/// [`PASSWORD`] as bcrypt (cost 4: each request checks it), made once with Python's `crypt`.
const PASSWORD_BCRYPT: &str = "$2b$04$XZz0lWjEhL5pbmi0s09.AeHSzAgNLYcMZWbEOPGMOM6HTmtWSRY5y";

const BIN: &str = "/usr/bin/docker-registry";

fn answers(addr: &str) -> bool {
    let addr: SocketAddr = addr.parse().unwrap();
    TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_ok()
}

/// `HANGAR_TEST_REGISTRY` (default 127.0.0.1:5005), which must answer.
pub fn open_registry() -> String {
    let addr = std::env::var("HANGAR_TEST_REGISTRY").unwrap_or_else(|_| "127.0.0.1:5005".into());
    assert!(
        addr.starts_with("127."),
        "HANGAR_TEST_REGISTRY={addr}: the tests use a registry on 127.0.0.0/8 only"
    );
    assert!(
        answers(&addr),
        "no registry answers on {addr}: run scripts/start-registry (HANGAR_TEST_DOCKER=0 skips the docker tests)"
    );
    addr
}

/// A tag no other test run uses.
pub fn unique_tag() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("t{}-{nanos}", std::process::id())
}

/// A registry of this test's own on a free port of 127.0.0.1 that takes only [`USER`]'s login;
/// stopped when dropped.
pub struct LoginRegistry {
    pub addr: String,
    child: Child,
    _dir: tempfile::TempDir,
}

impl LoginRegistry {
    pub fn start() -> LoginRegistry {
        assert!(
            Path::new(BIN).is_file(),
            "{BIN} is missing: run scripts/start-registry (it installs Debian's docker-registry)"
        );
        let dir = tempfile::tempdir().unwrap();
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let htpasswd = dir.path().join("htpasswd");
        std::fs::write(&htpasswd, format!("{USER}:{PASSWORD_BCRYPT}\n")).unwrap();
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {addr}\nauth:\n  htpasswd:\n    realm: hangar-test\n    path: {}\n",
                dir.path().join("data").display(),
                htpasswd.display()
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.path().join("registry.log")).unwrap();
        let child = Command::new(BIN)
            .arg("serve")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut r = LoginRegistry {
            addr,
            child,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !answers(&r.addr) {
            if let Ok(Some(status)) = r.child.try_wait() {
                let log = std::fs::read_to_string(r._dir.path().join("registry.log"));
                panic!("the registry exited ({status}): {log:?}");
            }
            assert!(Instant::now() < deadline, "the registry did not answer");
            std::thread::sleep(Duration::from_millis(100));
        }
        r
    }

    /// Its login as the Engine API takes it.
    pub fn credentials(&self) -> DockerCredentials {
        DockerCredentials {
            username: Some(USER.into()),
            password: Some(PASSWORD.into()),
            serveraddress: Some(self.addr.clone()),
            ..Default::default()
        }
    }
}

impl Drop for LoginRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether dockerd has `image`.
pub async fn is_local(docker: &Docker, image: &str) -> bool {
    docker.inspect_image(image).await.is_ok()
}

/// Removes the name `image` from this machine (the image itself stays under its other names).
pub async fn untag(docker: &Docker, image: &str) {
    let _ = docker
        .remove_image(
            image,
            None::<bollard::query_parameters::RemoveImageOptions>,
            None,
        )
        .await;
    assert!(!is_local(docker, image).await, "{image} is still here");
}

/// Pushes local image `local` to `repo:tag` (`repo` naming the registry), logging in with
/// `credentials`, then removes that name here, so only the registry has it: `repo:tag`.
pub async fn push(
    docker: &Docker,
    local: &str,
    repo: &str,
    tag: &str,
    credentials: Option<DockerCredentials>,
) -> String {
    docker
        .tag_image(
            local,
            Some(
                TagImageOptionsBuilder::default()
                    .repo(repo)
                    .tag(tag)
                    .build(),
            ),
        )
        .await
        .unwrap_or_else(|e| panic!("tagging {local} as {repo}:{tag}: {e}"));
    let mut pushed = docker.push_image(
        repo,
        Some(PushImageOptionsBuilder::default().tag(tag).build()),
        credentials,
    );
    while let Some(item) = pushed.next().await {
        if let Err(e) = item {
            panic!("pushing {repo}:{tag}: {e}");
        }
    }
    let name = format!("{repo}:{tag}");
    untag(docker, &name).await;
    name
}
