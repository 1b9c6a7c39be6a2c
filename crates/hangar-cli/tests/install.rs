//! Issue 23, "Done means": the Debian package `scripts/dist` builds, installed with dpkg into a
//! fresh container of the Debian test image that has Claude Code but no Rust and no checkout,
//! runs `hangar doctor`, `hangar harness check` and one turn against the scripted model, through
//! the installed binaries only: no `HANGAR_DRIVER_BIN`, no `HANGAR_TOWER_HOOK_BIN`, nothing of
//! this repository in the container.
//!
//! The package: `$HANGAR_TEST_DEB` (scripts/test builds it with scripts/dist), else built here.
//! Its one recommended package a turn needs and the image lacks, bubblewrap, is installed the
//! way apt would: from `$HANGAR_TEST_DEB_DEPS` (a folder of .deb files scripts/test downloads
//! with the machine's apt), else downloaded here. The container may make namespaces
//! (bubblewrap's, inside it: `SYS_ADMIN`, `NET_ADMIN` for its loopback, no seccomp or AppArmor
//! profile) and shares the host's
//! network namespace, where the scripted model listens on loopback. `HANGAR_TEST_DOCKER=0` skips it, saying so.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

use std::path::{Path, PathBuf};
use std::process::Command;

use hangar_testkit::{CLAUDE_CODE_VERSION, FakeAnthropic, Script, Step, workspace_root};

/// The package: `$HANGAR_TEST_DEB`, else `scripts/dist`'s.
fn package() -> PathBuf {
    if let Some(p) = std::env::var_os("HANGAR_TEST_DEB").filter(|v| !v.is_empty()) {
        return PathBuf::from(p);
    }
    let out = Command::new(workspace_root().join("scripts/dist"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "scripts/dist: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    PathBuf::from(text.lines().find(|l| l.ends_with(".deb")).unwrap())
}

/// A folder holding the bubblewrap package.
fn dependencies(scratch: &Path) -> PathBuf {
    if let Some(p) = std::env::var_os("HANGAR_TEST_DEB_DEPS").filter(|v| !v.is_empty()) {
        return PathBuf::from(p);
    }
    let out = Command::new("apt-get")
        .args(["download", "bubblewrap"])
        .current_dir(scratch)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "apt-get download bubblewrap: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    scratch.to_owned()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// What runs in the container: install, then the three commands, each one's output marked.
const SCRIPT: &str = r#"set -u
echo "== rust"; if command -v cargo rustc >/dev/null 2>&1 || [ -e /root/.cargo ]; then echo "rust is here"; exit 97; fi
echo "== install"; dpkg -i /deps/*.deb /pkg/hangar.deb >/dev/null || exit 98
echo "== env"; env | grep '^HANGAR_' || true
echo "== doctor"; hangar doctor; echo "doctor exit $?"
echo "== check"; hangar harness check --claude /usr/local/bin/claude; echo "check exit $?"
echo "== list"; hangar harness list --json
mkdir -p /work && cd /work && echo "a repo" > README
echo "== run"; hangar run --policy auto "say hello from the package"; echo "run exit $?"
"#;

#[test]
fn the_package_installs_into_a_fresh_debian_container_and_runs_a_turn() {
    if std::env::var("HANGAR_TEST_DOCKER").as_deref() == Ok("0") {
        eprintln!("skipped: HANGAR_TEST_DOCKER=0");
        return;
    }
    let deb = package();
    let scratch = tempfile::tempdir().unwrap();
    let deps = dependencies(scratch.path());
    let image = hangar_testkit::claude_image().unwrap();
    let fake = FakeAnthropic::start(Script::new([Step::text("hello from the package")])).unwrap();
    let port = free_port();
    let mut docker = Command::new("docker");
    // What bubblewrap needs to make namespaces in a container run as root (`--privileged`
    // also grants every capability, which a dockerd that itself runs confined cannot apply).
    docker.args([
        "run",
        "--rm",
        "--cap-add",
        "SYS_ADMIN",
        "--cap-add",
        "NET_ADMIN",
        "--security-opt",
        "seccomp=unconfined",
        "--security-opt",
        "apparmor=unconfined",
        "--network",
        "host",
        "-v",
        &format!("{}:/pkg/hangar.deb:ro", deb.display()),
        "-v",
        &format!("{}:/deps:ro", deps.display()),
    ]);
    for (k, v) in [
        ("ANTHROPIC_BASE_URL", fake.base_url()),
        ("ANTHROPIC_API_KEY", "sk-hangar-install-test".into()),
        ("CLAUDE_CONFIG_DIR", "/root/claude-config".into()),
        ("CLAUDE_CODE_MAX_RETRIES", "1".into()),
        ("DISABLE_AUTOUPDATER", "1".into()),
        ("HANGAR_URL", format!("http://127.0.0.1:{port}")),
    ] {
        docker.args(["-e", &format!("{k}={v}")]);
    }
    let out = docker
        .args([&image, "bash", "-c", SCRIPT])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{said}\n{err}");
    let part = |name: &str| -> String {
        said.split(&format!("== {name}\n"))
            .nth(1)
            .and_then(|rest| rest.split("\n== ").next())
            .unwrap_or_else(|| panic!("no {name} part in:\n{said}\n{err}"))
            .to_owned()
    };
    assert_eq!(
        part("env").trim(),
        "HANGAR_URL=http://127.0.0.1:".to_owned() + &port.to_string(),
        "only the server's address is given"
    );
    let doctor = part("doctor");
    for want in [
        "ok    driver        /usr/lib/hangar/hangar-driver",
        "ok    tower hook    /usr/lib/hangar/hangar-tower-hook",
        "ok    bubblewrap",
        &format!("ok    claude        claude {CLAUDE_CODE_VERSION}"),
        "doctor exit 0",
    ] {
        assert!(
            doctor.contains(want),
            "{want:?} missing from doctor:\n{doctor}\n{err}"
        );
    }
    let check = part("check");
    assert!(
        check.contains(&format!("claude {CLAUDE_CODE_VERSION}: suite passed"))
            && check.contains("check exit 0"),
        "{check}\n{err}"
    );
    let list = part("list");
    assert!(
        list.lines()
            .any(|l| l.contains("recorded by") && l.contains(CLAUDE_CODE_VERSION)),
        "{list}"
    );
    let run = part("run");
    assert!(
        run.contains("hello from the package") && run.contains("run exit 0"),
        "{run}\n{err}"
    );
    assert!(
        !fake.requests().is_empty(),
        "the turn did not reach the scripted model"
    );
}

/// `psql URL -c SQL` on this machine's test PostgreSQL.
fn psql(url: &str, sql: &str) {
    let out = Command::new("psql")
        .args([url, "-v", "ON_ERROR_STOP=1", "-qc", sql])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "psql {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A container that is removed when the test ends, however it ends.
struct Container(String);

impl Drop for Container {
    fn drop(&mut self) {
        let _ = Command::new("docker").args(["rm", "-f", &self.0]).output();
    }
}

impl Container {
    /// `docker exec` as the image's user; stdout, failing on a non-zero exit.
    fn exec(&self, args: &[&str]) -> String {
        let out = Command::new("docker")
            .args(["exec", &self.0])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn logs(&self) -> String {
        let out = Command::new("docker")
            .args(["logs", &self.0])
            .output()
            .unwrap();
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }
}

/// Issue 23, item 2: the container image of `hangar serve` (scripts/build-server-image, from
/// Debian's packages and the package above; here on the image with the pinned Claude Code, as
/// a team would add its harness) on PostgreSQL, as dist/compose.yaml runs it: it starts,
/// `/v1/ready` answers, a token is made in it, and a person's turn runs in a sandbox inside it
/// against the scripted model with the person's key from the vault.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_image_serves_a_turn_on_postgresql() {
    if std::env::var("HANGAR_TEST_DOCKER").as_deref() == Ok("0") {
        eprintln!("skipped: HANGAR_TEST_DOCKER=0");
        return;
    }
    let deb = package();
    let base = hangar_testkit::claude_image().unwrap();
    let built = Command::new(workspace_root().join("scripts/build-server-image"))
        .args(["--from", &base, "--deb", deb.to_str().unwrap()])
        .args(["--tag", "hangar-server-test:latest"])
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let image = String::from_utf8_lossy(&built.stdout).trim().to_owned();

    let pg = std::env::var("HANGAR_TEST_DATABASE_URL").expect(
        "HANGAR_TEST_DATABASE_URL is not set: url=$(scripts/start-postgres) && export \"$url\"",
    );
    let schema = format!("image_{}_{}", std::process::id(), free_port());
    psql(&pg, &format!("CREATE SCHEMA {schema}"));
    struct SchemaGone(String, String);
    impl Drop for SchemaGone {
        fn drop(&mut self) {
            psql(
                &self.0,
                &format!("DROP SCHEMA IF EXISTS {} CASCADE", self.1),
            );
        }
    }
    let _schema = SchemaGone(pg.clone(), schema.clone());
    let sep = if pg.contains('?') { '&' } else { '?' };
    let database = format!("{pg}{sep}options=-c%20search_path%3D{schema}");

    let key = "sk-hangar-image-test-7f2c";
    let fake = FakeAnthropic::start(Script::new([Step::text("served from the image")])).unwrap();
    let port = free_port();
    let name = format!("hangar-image-test-{port}");
    let started = Command::new("docker")
        .args([
            "run",
            "-d",
            "--privileged",
            "--network",
            "host",
            "--name",
            &name,
        ])
        .args(["-e", &format!("HANGAR_DATABASE_URL={database}")])
        .args(["-e", &format!("ANTHROPIC_BASE_URL={}", fake.base_url())])
        .args([&image, "serve", "--listen", &format!("127.0.0.1:{port}")])
        .output()
        .unwrap();
    assert!(
        started.status.success(),
        "{}",
        String::from_utf8_lossy(&started.stderr)
    );
    let c = Container(name);
    let url = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        if let Ok(r) = client.get(format!("{url}/v1/ready")).send().await
            && r.status().as_u16() == 200
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "/v1/ready never answered 200:\n{}",
            c.logs()
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    c.exec(&["hangar", "person", "add", "ada@example.com"]);
    let token = c.exec(&["hangar", "token", "create", "--person", "ada@example.com"]);
    let token = token.lines().last().unwrap().trim().to_owned();
    c.exec(&["mkdir", "-p", "/tmp/work"]);
    let call = async |method: reqwest::Method, path: &str, body: serde_json::Value| {
        let r = client
            .request(method, format!("{url}{path}"))
            .bearer_auth(&token)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (
            status,
            r.json::<serde_json::Value>().await.unwrap_or_default(),
        )
    };
    let (status, body) = call(
        reqwest::Method::POST,
        "/v1/credentials/ANTHROPIC_API_KEY?person=ada@example.com",
        serde_json::json!({"value": key}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, started) = call(
        reqwest::Method::POST,
        "/v1/sessions",
        serde_json::json!({"dir": "/tmp/work", "policy": "auto", "prompt": "hello"}),
    )
    .await;
    assert_eq!(status, 201, "{started}\n{}", c.logs());
    let turn = started["turn"]["id"].as_str().unwrap().to_owned();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    let ended = loop {
        let t: serde_json::Value = client
            .get(format!("{url}/v1/turns/{turn}"))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap_or_default();
        if t["state"] == "ended" {
            break t;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the turn did not end: {t}\n{}",
            c.logs()
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert_eq!(ended["status"], 0, "{ended}\n{}", c.logs());
    let requests = fake.requests();
    assert!(!requests.is_empty(), "the turn never reached the model");
    for r in &requests {
        assert_eq!(r.header("x-api-key"), Some(key), "{:?}", r.headers);
    }
}

/// dist/compose.yaml stays true to what the image and the server take: the image's tag is the
/// one scripts/build-server-image gives this version, every variable it sets for hangar is one
/// hangar reads, the database URL names the compose file's own PostgreSQL service, the port is
/// published on loopback only (plain HTTP), the store is a volume, and the health check asks
/// `/v1/ready`.
#[test]
fn the_compose_file_matches_the_image_and_the_settings() {
    let root = workspace_root();
    let text = std::fs::read_to_string(root.join("dist/compose.yaml")).unwrap();
    let doc: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    let hangar = &doc["services"]["hangar"];
    let image = hangar["image"].as_str().unwrap();
    assert!(
        image.contains(&format!("hangar:{}", env!("CARGO_PKG_VERSION"))),
        "{image}"
    );
    let env_rs = std::fs::read_to_string(root.join("crates/hangar-protocol/src/env.rs")).unwrap();
    let vars = hangar["environment"].as_mapping().unwrap();
    for (k, _) in vars {
        let k = k.as_str().unwrap();
        assert!(
            env_rs.contains(&format!("\"{k}\"")),
            "{k} is not a variable hangar reads"
        );
    }
    let url = vars
        .get(serde_yaml::Value::from("HANGAR_DATABASE_URL"))
        .and_then(|v| v.as_str())
        .unwrap();
    assert!(
        url.starts_with("postgres://") && url.contains("@postgres/"),
        "{url}"
    );
    assert!(doc["services"]["postgres"].is_mapping());
    let ports: Vec<&str> = hangar["ports"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|p| p.as_str())
        .collect();
    assert!(
        ports.iter().all(|p| p.starts_with("127.0.0.1:")),
        "{ports:?}"
    );
    let volumes: Vec<&str> = hangar["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert!(
        volumes.iter().any(|v| v.ends_with(":/var/lib/hangar")),
        "{volumes:?}"
    );
    let health = serde_yaml::to_string(&hangar["healthcheck"]["test"]).unwrap();
    assert!(health.contains("/v1/ready"), "{health}");
    // The image's home is the volume's.
    let script = std::fs::read_to_string(root.join("scripts/build-server-image")).unwrap();
    assert!(
        script.contains("HANGAR_HOME=/var/lib/hangar") && script.contains("VOLUME /var/lib/hangar")
    );
}

/// The documents of a YAML file.
fn yaml_docs(path: &Path) -> Vec<serde_yaml::Value> {
    use serde::Deserialize;
    let text = std::fs::read_to_string(path).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde_yaml::Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

/// `kubernetes-validate --strict` (from PyPI, installed by scripts/install-tools) on `files`:
/// its exit status and what it said.
fn kubernetes_validate(files: &[PathBuf]) -> (bool, String) {
    let bin = workspace_root().join(".tools/py/bin/kubernetes-validate");
    assert!(
        bin.exists(),
        "{} is missing: run scripts/install-tools (installs kubernetes-validate from PyPI into .tools/py)",
        bin.display()
    );
    let out = Command::new(&bin)
        .arg("--strict")
        .args(files)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

/// dist/kubernetes (issue 24, item 4): every object validates against the Kubernetes API's
/// published schemas (kubernetes-validate, strict: no field the API does not know; a broken
/// copy is refused, so the validator is not a formality), and the objects fit together and fit
/// hangar: several replicas, readiness on `/v1/ready`, the master key from a Secret copied to a
/// file only the server's user reads, variables hangar reads, the sandbox provider's
/// permissions, a Service and a PodDisruptionBudget that select the server's pods, and a
/// kustomization that lists every file.
#[test]
fn the_kubernetes_manifests_are_valid_objects_that_fit_together() {
    let dir = workspace_root().join("dist/kubernetes");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == "yaml")
                && p.file_name().is_some_and(|n| n != "kustomization.yaml")
        })
        .collect();
    files.sort();
    let docs: Vec<serde_yaml::Value> = files.iter().flat_map(|f| yaml_docs(f)).collect();
    let (ok, said) = kubernetes_validate(&files);
    assert!(ok, "{said}");
    assert_eq!(
        said.matches(" passed for resource ").count(),
        docs.len(),
        "every object validated: {said}"
    );
    // A broken copy is refused.
    let tmp = tempfile::tempdir().unwrap();
    let broken = tmp.path().join("broken.yaml");
    let text = std::fs::read_to_string(dir.join("hangar.yaml")).unwrap();
    std::fs::write(&broken, text.replace("  replicas: 2", "  replicas: two")).unwrap();
    let (ok, said) = kubernetes_validate(&[broken]);
    assert!(!ok && said.contains("spec.replicas"), "{said}");

    let kind =
        |k: &str| -> Vec<&serde_yaml::Value> { docs.iter().filter(|d| d["kind"] == k).collect() };
    let deployment = kind("Deployment")[0];
    assert!(deployment["spec"]["replicas"].as_u64().unwrap() >= 2);
    let pod = &deployment["spec"]["template"];
    let labels = pod["metadata"]["labels"].as_mapping().unwrap();
    let selects_pods = |sel: &serde_yaml::Value| {
        let sel = sel.as_mapping().unwrap();
        !sel.is_empty() && sel.iter().all(|(k, v)| labels.get(k) == Some(v))
    };
    assert!(selects_pods(&deployment["spec"]["selector"]["matchLabels"]));
    assert!(selects_pods(&kind("Service")[0]["spec"]["selector"]));
    assert!(selects_pods(
        &kind("PodDisruptionBudget")[0]["spec"]["selector"]["matchLabels"]
    ));
    let server = &pod["spec"]["containers"][0];
    assert_eq!(server["readinessProbe"]["httpGet"]["path"], "/v1/ready");
    assert!(
        server["image"]
            .as_str()
            .unwrap()
            .ends_with(&format!("hangar:{}", env!("CARGO_PKG_VERSION")))
    );
    let env_rs =
        std::fs::read_to_string(workspace_root().join("crates/hangar-protocol/src/env.rs"))
            .unwrap();
    let mut key_file = None;
    let env = server["env"].as_sequence().unwrap();
    for e in env {
        let name = e["name"].as_str().unwrap();
        // A variable only another one's value names (`$(POD_IP)`) is Kubernetes', not hangar's.
        let named = env.iter().any(|o| {
            o["value"]
                .as_str()
                .is_some_and(|v| v.contains(&format!("$({name})")))
        });
        assert!(
            named || env_rs.contains(&format!("\"{name}\"")),
            "{name} is not a variable hangar reads"
        );
        if name == "HANGAR_MASTER_KEY_FILE" {
            key_file = e["value"].as_str();
        }
    }
    // The key: copied from its Secret, mode 0600, by the image's own user, into a folder the
    // server mounts; the Secret itself is not mounted into the server.
    let key_file = Path::new(key_file.expect("HANGAR_MASTER_KEY_FILE is set"));
    let mounts = |c: &serde_yaml::Value| -> Vec<(String, String)> {
        c["volumeMounts"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["name"].as_str().unwrap().to_owned(),
                    m["mountPath"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    let server_mounts = mounts(server);
    assert!(
        server_mounts
            .iter()
            .any(|(_, at)| Path::new(at) == key_file.parent().unwrap()),
        "{server_mounts:?}"
    );
    let init = &pod["spec"]["initContainers"][0];
    let copy: Vec<&str> = init["command"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(copy[..3], ["install", "-m", "0600"], "{copy:?}");
    assert_eq!(Path::new(copy[copy.len() - 1]), key_file);
    assert!(
        init.get("securityContext").is_none(),
        "the image's own user copies the key"
    );
    let secret_volume = pod["spec"]["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v["secret"]["secretName"] == "hangar-master-key")
        .unwrap()["name"]
        .as_str()
        .unwrap();
    assert!(mounts(init).iter().any(|(n, _)| n == secret_volume));
    assert!(!server_mounts.iter().any(|(n, _)| n == secret_volume));
    // What the kubernetes provider does, and nothing cluster-wide.
    assert!(kind("ClusterRole").is_empty() && kind("ClusterRoleBinding").is_empty());
    let rules = serde_yaml::to_string(&kind("Role")[0]["rules"]).unwrap();
    for needed in ["pods", "pods/exec", "networkpolicies", "create", "delete"] {
        assert!(rules.contains(needed), "the Role lacks {needed}: {rules}");
    }
    assert_eq!(
        pod["spec"]["serviceAccountName"],
        kind("RoleBinding")[0]["subjects"][0]["name"]
    );
    // Nothing shared on disk: the home is each pod's own cache (issue 24, item 1).
    assert!(kind("PersistentVolumeClaim").is_empty());
    let home_volume = server_mounts
        .iter()
        .find(|(_, at)| at == "/var/lib/hangar")
        .map(|(n, _)| n.clone())
        .expect("the server mounts a home");
    let home = pod["spec"]["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v["name"].as_str() == Some(home_volume.as_str()))
        .unwrap();
    assert!(home["emptyDir"].is_mapping(), "{home:?}");
    // The kustomization lists every file.
    let kustomization = &yaml_docs(&dir.join("kustomization.yaml"))[0];
    let listed: Vec<&str> = kustomization["resources"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    for f in &files {
        let name = f.file_name().unwrap().to_str().unwrap();
        assert!(
            listed.contains(&name),
            "kustomization.yaml does not list {name}"
        );
    }
}
