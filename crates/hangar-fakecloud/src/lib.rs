//! Test double: a fake Kubernetes API server and a fake E2B API (with each sandbox's envd) on
//! 127.0.0.1, for the kubernetes and e2b providers' tests. No Kubernetes cluster or E2B account
//! can be reached from hangar's machines, so these speak the few endpoints the providers call,
//! shaped as the Kubernetes API reference and E2B's public API and envd protocol describe them,
//! and make what they are asked for out of real containers of the local dockerd (the test image):
//! a pod's or an E2B sandbox's commands really run, in its image.
//!
//! What is faked, and so verified only against this fake:
//! - Kubernetes: `GET /version`; pods: create, get, delete (`/api/v1/namespaces/NS/pods`);
//!   network policies: create, delete; `pods/NAME/exec` over a websocket
//!   (`v5.channel.k8s.io`, or `v4`): channels 0-4 and 255 (stdin's end), the exit status as a
//!   `Status` on channel 3, a terminal and its resizes when `tty=true` (what `kubectl exec -it`
//!   sends). A pod's container is a docker container of the pod's image and command, with its
//!   cpu and memory limits; a pod that a network policy denying all egress selects gets
//!   `--network none`, any other pod the host's network (this machine's only network: the
//!   stand-in for a pod network). Nothing of scheduling, image pulls, RBAC, TLS or watches.
//! - E2B: `POST /sandboxes` (the `X-API-Key` checked; `templateID` is a local image;
//!   `allow_internet_access: false` is `--network none`, true the host's network; egress rules
//!   `network.allowOut`/`denyOut` are checked as E2B's API describes them (deny entries only
//!   addresses and CIDR blocks; a domain allowed only with all traffic denied) and kept
//!   ([`FakeCloud::e2b_created`]), and a sandbox denied all traffic gets `--network none`
//!   whatever it allows: the fake cannot filter by name), `DELETE
//!   /sandboxes/ID`, `POST /sandboxes/ID/timeout` (the sandbox is removed when its timeout,
//!   from creation or the last such call, passes), and envd at `/envd/ID`: `process.Process/Start` (Connect server stream,
//!   JSON envelopes: start, data, end, end of stream; with `pty` a real terminal of the given
//!   size, its output as `data.pty`; the process outlives its stream, as envd's do), `Connect`
//!   (a stream on a running process by `pid`: its `start`, then its output from then on and its
//!   end), `SendInput` (`stdin` or `pty`), `Update` (a PTY's
//!   resize), `SendSignal` (SIGKILL to a PTY process: its exec's process killed on the host,
//!   which needs the fake to run as root), `CloseStdin`, the `X-Access-Token` checked. Unknown sandboxes answer 502 as E2B's edge does.
//!
//! Every container is labelled with the fake's own instance label and removed when the fake is
//! dropped.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path as UrlPath, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, delete, get, post};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use bollard::Docker;
use bollard::exec::{CreateExecOptions, ResizeExecOptions, StartExecOptions, StartExecResults};
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{ListContainersOptionsBuilder, RemoveContainerOptionsBuilder};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

/// The label on every container a fake makes (value: the fake's instance).
pub const INSTANCE_LABEL: &str = "dev.hangar.fakecloud";
/// The label naming the hangar sandbox a container stands for.
pub const SANDBOX_LABEL: &str = "dev.hangar.sandbox";

type Input = std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>;

#[derive(Default)]
struct Inner {
    /// (namespace, name) -> the pod as stored, and its container.
    pods: HashMap<(String, String), (Value, Option<String>)>,
    policies: HashMap<(String, String), Value>,
    /// E2B sandbox id -> container, envd token.
    e2b: HashMap<String, (String, String)>,
    /// The body of every `POST /sandboxes` that made a sandbox, in order.
    e2b_created: Vec<Value>,
    /// E2B sandbox id -> when it expires (its timeout from creation or the last extension).
    e2b_deadline: HashMap<String, tokio::time::Instant>,
    /// envd pids -> the process's stdin.
    stdin: HashMap<u64, Arc<tokio::sync::Mutex<Option<Input>>>>,
    /// envd pids of PTY processes -> their docker exec (for resizes).
    ptys: HashMap<u64, String>,
    /// envd pids of running processes -> their events, for every stream on them (`Start`'s,
    /// and any `Connect`'s): a process outlives the streams on it, as envd's do.
    events: HashMap<u64, tokio::sync::broadcast::Sender<Bytes>>,
    next: u64,
    /// `METHOD path` of every request, in order.
    log: Vec<String>,
}

struct Shared {
    docker: Docker,
    instance: String,
    e2b_key: String,
    inner: Mutex<Inner>,
}

/// A running fake (both APIs on one address). Dropping it stops it and removes its containers.
pub struct FakeCloud {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for FakeCloud {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeCloud")
            .field("addr", &self.addr)
            .finish()
    }
}

fn lock(s: &Shared) -> std::sync::MutexGuard<'_, Inner> {
    s.inner.lock().unwrap_or_else(|p| p.into_inner())
}

impl FakeCloud {
    /// Starts the fake on 127.0.0.1 (a thread and runtime of its own). `e2b_key` is the API
    /// key the fake E2B accepts.
    pub fn start(e2b_key: &str) -> std::io::Result<FakeCloud> {
        let docker = Docker::connect_with_local_defaults().map_err(std::io::Error::other)?;
        let mut rnd = [0u8; 8];
        getrandom(&mut rnd);
        let shared = Arc::new(Shared {
            docker,
            instance: hex(&rnd),
            e2b_key: e2b_key.to_owned(),
            inner: Mutex::new(Inner::default()),
        });
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let app = router(shared.clone());
        let thread = std::thread::Builder::new()
            .name("fakecloud".into())
            .spawn(move || {
                let Ok(rt) = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                else {
                    return;
                };
                rt.block_on(async move {
                    let Ok(l) = tokio::net::TcpListener::from_std(listener) else {
                        return;
                    };
                    let _ = axum::serve(l, app)
                        .with_graceful_shutdown(async move {
                            let _ = stopped.await;
                        })
                        .await;
                });
                rt.shutdown_timeout(std::time::Duration::from_secs(1));
            })?;
        Ok(FakeCloud {
            addr,
            shared,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// envd's address for the e2b provider (`HANGAR_E2B_ENVD_URL`).
    pub fn envd_url(&self) -> String {
        format!("http://{}/envd/{{sandbox}}", self.addr)
    }

    /// Writes a kubeconfig naming the fake as the cluster (namespace `ns`), for kube and kubectl.
    pub fn write_kubeconfig(&self, path: &Path, ns: &str) -> std::io::Result<()> {
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    namespace: {ns}\n    user: fake\nusers:\n- name: fake\n  user: {{}}\ncurrent-context: fake\n",
            self.url()
        );
        std::fs::write(path, text)
    }

    /// The requests so far, as `METHOD path`.
    pub fn requests(&self) -> Vec<String> {
        lock(&self.shared).log.clone()
    }

    /// The body of every `POST /sandboxes` that made an E2B sandbox, in order.
    pub fn e2b_created(&self) -> Vec<Value> {
        lock(&self.shared).e2b_created.clone()
    }

    /// The envd access token of every live E2B sandbox of the fake (tests check that it never
    /// leaves hangar's server).
    pub fn envd_tokens(&self) -> Vec<String> {
        lock(&self.shared)
            .e2b
            .values()
            .map(|(_, token)| token.clone())
            .collect()
    }

    /// The pods as the fake stores them (what the provider sent, with a status).
    pub fn pods(&self) -> Vec<Value> {
        lock(&self.shared)
            .pods
            .values()
            .map(|(p, _)| p.clone())
            .collect()
    }

    pub fn network_policies(&self) -> Vec<Value> {
        lock(&self.shared).policies.values().cloned().collect()
    }

    /// The ids of the containers standing for hangar sandbox `sandbox` (on this fake), live or not.
    pub async fn containers_of(&self, sandbox: &str) -> Vec<String> {
        containers(&self.shared, Some(sandbox)).await
    }
}

impl Drop for FakeCloud {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let shared = self.shared.clone();
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                for id in containers(&shared, None).await {
                    remove(&shared.docker, &id).await;
                }
            });
        })
        .join();
    }
}

fn getrandom(buf: &mut [u8]) {
    use std::hash::{BuildHasher, Hasher};
    for chunk in buf.chunks_mut(8) {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0),
        );
        let v = h.finish().to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

async fn containers(s: &Shared, sandbox: Option<&str>) -> Vec<String> {
    let mut labels = vec![format!("{INSTANCE_LABEL}={}", s.instance)];
    if let Some(sb) = sandbox {
        labels.push(format!("{SANDBOX_LABEL}={sb}"));
    }
    let filters = HashMap::from([("label".to_owned(), labels)]);
    s.docker
        .list_containers(Some(
            ListContainersOptionsBuilder::default()
                .all(true)
                .filters(&filters)
                .build(),
        ))
        .await
        .unwrap_or_default()
        .into_iter()
        .filter_map(|c| c.id)
        .collect()
}

async fn remove(docker: &Docker, id: &str) {
    let _ = docker
        .remove_container(
            id,
            Some(
                RemoveContainerOptionsBuilder::default()
                    .force(true)
                    .v(true)
                    .build(),
            ),
        )
        .await;
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/version", get(version))
        .route("/api", get(discovery_api))
        .route("/apis", get(discovery_apis))
        .route("/api/v1", get(discovery_v1))
        .route("/apis/networking.k8s.io/v1", get(discovery_networking))
        .route("/api/v1/namespaces/{ns}/pods", post(create_pod))
        .route(
            "/api/v1/namespaces/{ns}/pods/{name}",
            get(get_pod).delete(delete_pod),
        )
        .route("/api/v1/namespaces/{ns}/pods/{name}/exec", any(exec_pod))
        .route(
            "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies",
            post(create_policy),
        )
        .route(
            "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies/{name}",
            delete(delete_policy),
        )
        .route("/sandboxes", post(e2b_create))
        .route("/sandboxes/{id}", delete(e2b_kill))
        .route("/sandboxes/{id}/timeout", post(e2b_timeout))
        .route("/envd/{id}/process.Process/Start", post(envd_start))
        .route("/envd/{id}/process.Process/Connect", post(envd_connect))
        .route("/envd/{id}/process.Process/SendInput", post(envd_input))
        .route("/envd/{id}/process.Process/CloseStdin", post(envd_close))
        .route("/envd/{id}/process.Process/Update", post(envd_update))
        .route("/envd/{id}/process.Process/SendSignal", post(envd_signal))
        .layer(axum::middleware::from_fn_with_state(shared.clone(), record))
        .with_state(shared)
}

async fn record(
    State(s): State<Arc<Shared>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    lock(&s)
        .log
        .push(format!("{} {}", req.method(), req.uri().path()));
    next.run(req).await
}

/// A Kubernetes `Status` error.
fn k8s_error(code: StatusCode, reason: &str, message: String) -> Response {
    (
        code,
        axum::Json(json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": message, "reason": reason, "code": code.as_u16(),
        })),
    )
        .into_response()
}

fn not_found(kind: &str, name: &str) -> Response {
    k8s_error(
        StatusCode::NOT_FOUND,
        "NotFound",
        format!("{kind} \"{name}\" not found"),
    )
}

async fn version() -> Response {
    axum::Json(json!({
        "major": "1", "minor": "37", "gitVersion": "v1.37.0-fakecloud", "gitCommit": "fake",
        "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.25",
        "compiler": "gc", "platform": "linux/amd64",
    }))
    .into_response()
}

/// Discovery, as `kubectl` asks for it before an exec.
async fn discovery_api() -> Response {
    axum::Json(json!({
        "kind": "APIVersions", "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}],
    }))
    .into_response()
}

async fn discovery_apis() -> Response {
    let v = json!({"groupVersion": "networking.k8s.io/v1", "version": "v1"});
    axum::Json(json!({
        "kind": "APIGroupList", "apiVersion": "v1",
        "groups": [{"name": "networking.k8s.io", "versions": [v], "preferredVersion": v}],
    }))
    .into_response()
}

async fn discovery_v1() -> Response {
    axum::Json(json!({
        "kind": "APIResourceList", "groupVersion": "v1",
        "resources": [
            {"name": "pods", "singularName": "pod", "namespaced": true, "kind": "Pod",
             "verbs": ["create", "delete", "get"], "shortNames": ["po"]},
            {"name": "pods/exec", "singularName": "", "namespaced": true,
             "kind": "PodExecOptions", "verbs": ["create", "get"]},
        ],
    }))
    .into_response()
}

async fn discovery_networking() -> Response {
    axum::Json(json!({
        "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "networking.k8s.io/v1",
        "resources": [{"name": "networkpolicies", "singularName": "networkpolicy",
            "namespaced": true, "kind": "NetworkPolicy", "verbs": ["create", "delete"],
            "shortNames": ["netpol"]}],
    }))
    .into_response()
}

/// `1500m` -> 1.5 cpus; `2` -> 2.
fn cpus(q: &str) -> Option<f64> {
    match q.strip_suffix('m') {
        Some(m) => m.parse::<f64>().ok().map(|m| m / 1000.0),
        None => q.parse().ok(),
    }
}

fn selected_by(policy: &Value, labels: &Value) -> bool {
    let Some(want) = policy
        .pointer("/spec/podSelector/matchLabels")
        .and_then(Value::as_object)
    else {
        return true;
    };
    want.iter().all(|(k, v)| labels.get(k) == Some(v))
}

fn denies_all_egress(policy: &Value) -> bool {
    let types = policy
        .pointer("/spec/policyTypes")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    types.iter().any(|t| t == "Egress")
        && policy
            .pointer("/spec/egress")
            .and_then(Value::as_array)
            .is_none_or(|e| e.is_empty())
}

/// A container to make: what a pod or an E2B sandbox asks for.
struct Want<'a> {
    image: &'a str,
    command: Vec<String>,
    env: Vec<String>,
    network: &'a str,
    sandbox: &'a str,
    cpu: Option<f64>,
    memory: Option<i64>,
}

async fn run_container(s: &Shared, w: Want<'_>) -> Result<String, String> {
    let Want {
        image,
        command,
        env,
        network,
        sandbox,
        cpu,
        memory,
    } = w;
    let body = ContainerCreateBody {
        image: Some(image.to_owned()),
        entrypoint: Some(command),
        cmd: Some(vec![]),
        user: Some("0:0".into()),
        env: Some(env),
        labels: Some(HashMap::from([
            (INSTANCE_LABEL.to_owned(), s.instance.clone()),
            (SANDBOX_LABEL.to_owned(), sandbox.to_owned()),
        ])),
        host_config: Some(HostConfig {
            network_mode: Some(network.to_owned()),
            init: Some(true),
            nano_cpus: cpu.map(|c| (c * 1e9) as i64),
            memory,
            ..Default::default()
        }),
        ..Default::default()
    };
    let made = s
        .docker
        .create_container(None, body)
        .await
        .map_err(|e| e.to_string())?;
    if let Err(e) = s.docker.start_container(&made.id, None).await {
        remove(&s.docker, &made.id).await;
        return Err(e.to_string());
    }
    Ok(made.id)
}

async fn create_pod(
    State(s): State<Arc<Shared>>,
    UrlPath(ns): UrlPath<String>,
    body: Bytes,
) -> Response {
    let Ok(mut pod) = serde_json::from_slice::<Value>(&body) else {
        return k8s_error(StatusCode::BAD_REQUEST, "BadRequest", "not JSON".into());
    };
    let Some(name) = pod
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .map(str::to_owned)
    else {
        return k8s_error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            "metadata.name: Required value".into(),
        );
    };
    let key = (ns.clone(), name.clone());
    if lock(&s).pods.contains_key(&key) {
        return k8s_error(
            StatusCode::CONFLICT,
            "AlreadyExists",
            format!("pods \"{name}\" already exists"),
        );
    }
    let c = pod
        .pointer("/spec/containers/0")
        .cloned()
        .unwrap_or(Value::Null);
    let Some(image) = c.get("image").and_then(Value::as_str).map(str::to_owned) else {
        return k8s_error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            "spec.containers[0].image: Required value".into(),
        );
    };
    let strings = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut command = strings(c.get("command"));
    command.extend(strings(c.get("args")));
    if command.is_empty() {
        command = vec!["sleep".into(), "infinity".into()];
    }
    let env: Vec<String> = c
        .get("env")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|e| {
                    Some(format!(
                        "{}={}",
                        e.get("name")?.as_str()?,
                        e.get("value").and_then(Value::as_str).unwrap_or("")
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    let labels = pod
        .pointer("/metadata/labels")
        .cloned()
        .unwrap_or(json!({}));
    let host_network = pod
        .pointer("/spec/hostNetwork")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let isolated = lock(&s)
        .policies
        .iter()
        .any(|((pns, _), p)| *pns == ns && selected_by(p, &labels) && denies_all_egress(p));
    let network = if isolated && !host_network {
        "none"
    } else {
        "host"
    };
    let cpu = c
        .pointer("/resources/limits/cpu")
        .and_then(Value::as_str)
        .and_then(cpus);
    let memory = c
        .pointer("/resources/limits/memory")
        .and_then(Value::as_str)
        .and_then(|m| m.parse().ok());
    let sandbox = labels
        .get(SANDBOX_LABEL)
        .and_then(Value::as_str)
        .unwrap_or(&name)
        .to_owned();
    let made = run_container(
        &s,
        Want {
            image: &image,
            command,
            env,
            network,
            sandbox: &sandbox,
            cpu,
            memory,
        },
    )
    .await;
    let meta = pod.get_mut("metadata").and_then(Value::as_object_mut);
    if let Some(m) = meta {
        m.insert("namespace".into(), ns.clone().into());
        m.insert("uid".into(), format!("fake-{name}").into());
        m.insert("creationTimestamp".into(), "2026-01-01T00:00:00Z".into());
    }
    let (status, container) = match made {
        Ok(id) => (
            json!({
                "phase": "Running",
                "containerStatuses": [{"name": c.get("name"), "image": image, "imageID": "",
                    "ready": true, "restartCount": 0, "state": {"running": {}}}],
            }),
            Some(id),
        ),
        Err(e) => (
            json!({
                "phase": "Pending",
                "containerStatuses": [{"name": c.get("name"), "image": image, "imageID": "",
                    "ready": false, "restartCount": 0,
                    "state": {"waiting": {"reason": "ErrImagePull", "message": e}}}],
            }),
            None,
        ),
    };
    if let Some(o) = pod.as_object_mut() {
        o.insert("status".into(), status);
    }
    lock(&s).pods.insert(key, (pod.clone(), container));
    (StatusCode::CREATED, axum::Json(pod)).into_response()
}

async fn get_pod(
    State(s): State<Arc<Shared>>,
    UrlPath((ns, name)): UrlPath<(String, String)>,
) -> Response {
    match lock(&s).pods.get(&(ns, name.clone())) {
        Some((p, _)) => axum::Json(p.clone()).into_response(),
        None => not_found("pods", &name),
    }
}

async fn delete_pod(
    State(s): State<Arc<Shared>>,
    UrlPath((ns, name)): UrlPath<(String, String)>,
) -> Response {
    let gone = lock(&s).pods.remove(&(ns, name.clone()));
    match gone {
        Some((p, c)) => {
            if let Some(c) = c {
                remove(&s.docker, &c).await;
            }
            axum::Json(p).into_response()
        }
        None => not_found("pods", &name),
    }
}

async fn create_policy(
    State(s): State<Arc<Shared>>,
    UrlPath(ns): UrlPath<String>,
    body: Bytes,
) -> Response {
    let Ok(mut p) = serde_json::from_slice::<Value>(&body) else {
        return k8s_error(StatusCode::BAD_REQUEST, "BadRequest", "not JSON".into());
    };
    let Some(name) = p
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .map(str::to_owned)
    else {
        return k8s_error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            "metadata.name: Required value".into(),
        );
    };
    if let Some(m) = p.get_mut("metadata").and_then(Value::as_object_mut) {
        m.insert("namespace".into(), ns.clone().into());
    }
    let mut inner = lock(&s);
    if inner.policies.contains_key(&(ns.clone(), name.clone())) {
        return k8s_error(
            StatusCode::CONFLICT,
            "AlreadyExists",
            format!("networkpolicies.networking.k8s.io \"{name}\" already exists"),
        );
    }
    inner.policies.insert((ns, name), p.clone());
    (StatusCode::CREATED, axum::Json(p)).into_response()
}

async fn delete_policy(
    State(s): State<Arc<Shared>>,
    UrlPath((ns, name)): UrlPath<(String, String)>,
) -> Response {
    match lock(&s).policies.remove(&(ns, name.clone())) {
        Some(_) => axum::Json(
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}),
        )
        .into_response(),
        None => not_found("networkpolicies.networking.k8s.io", &name),
    }
}

/// `a=1&b=x%20y&command=sh&command=-c` as pairs, decoded.
fn query_pairs(q: &str) -> Vec<(String, String)> {
    fn decode(s: &str) -> String {
        let b = s.as_bytes();
        let mut out = Vec::with_capacity(b.len());
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < b.len() => {
                    let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("");
                    match u8::from_str_radix(hex, 16) {
                        Ok(v) => {
                            out.push(v);
                            i += 2;
                        }
                        Err(_) => out.push(b'%'),
                    }
                }
                c => out.push(c),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(p), String::new()),
        })
        .collect()
}

async fn exec_pod(
    State(s): State<Arc<Shared>>,
    UrlPath((ns, name)): UrlPath<(String, String)>,
    RawQuery(q): RawQuery,
    ws: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Response {
    let pairs = query_pairs(q.as_deref().unwrap_or(""));
    let flag = |k: &str| {
        pairs
            .iter()
            .any(|(pk, v)| pk == k && (v == "true" || v == "1"))
    };
    let command: Vec<String> = pairs
        .iter()
        .filter(|(k, _)| k == "command")
        .map(|(_, v)| v.clone())
        .collect();
    let container = lock(&s)
        .pods
        .get(&(ns, name.clone()))
        .map(|(_, c)| c.clone());
    let Some(container) = container else {
        return not_found("pods", &name);
    };
    let Some(container) = container else {
        return k8s_error(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            format!("pod {name} is not running"),
        );
    };
    let Ok(ws) = ws else {
        return k8s_error(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "the fake speaks exec over websockets only (v5.channel.k8s.io, v4.channel.k8s.io)"
                .into(),
        );
    };
    if command.is_empty() {
        return k8s_error(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "you must specify at least 1 command".into(),
        );
    }
    let (stdin, tty) = (flag("stdin"), flag("tty"));
    ws.protocols(["v5.channel.k8s.io", "v4.channel.k8s.io"])
        .on_upgrade(move |socket| async move {
            exec_session(s, socket, container, command, stdin, tty).await;
        })
}

/// The close frame an API server ends an exec with (1000, normal closure): kubectl reports a
/// close without a status as an error and exits 1.
fn normal_close() -> Message {
    Message::Close(Some(axum::extract::ws::CloseFrame {
        code: axum::extract::ws::close_code::NORMAL,
        reason: "".into(),
    }))
}

fn exit_status(code: Option<i64>, err: Option<String>) -> Value {
    match (code, err) {
        (Some(0), None) => json!({"metadata": {}, "status": "Success"}),
        (Some(c), None) => json!({
            "metadata": {}, "status": "Failure",
            "message": format!("command terminated with non-zero exit code: exit status {c}"),
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": c.to_string()}]},
        }),
        (_, e) => json!({
            "metadata": {}, "status": "Failure",
            "message": e.unwrap_or_else(|| "the command's end is unknown".into()),
            "reason": "InternalError",
        }),
    }
}

/// Starts a docker exec; its output stream, stdin, and id.
async fn docker_exec(
    docker: &Docker,
    container: &str,
    command: Vec<String>,
    user: &str,
    cwd: Option<String>,
    stdin: bool,
    tty: bool,
) -> Result<
    (
        std::pin::Pin<
            Box<
                dyn futures_util::Stream<
                        Item = Result<bollard::container::LogOutput, bollard::errors::Error>,
                    > + Send,
            >,
        >,
        Input,
        String,
    ),
    String,
> {
    let exec = docker
        .create_exec(
            container,
            CreateExecOptions {
                attach_stdin: Some(stdin),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                tty: Some(tty),
                cmd: Some(command),
                user: Some(user.to_owned()),
                working_dir: cwd,
                ..Default::default()
            },
        )
        .await
        .map_err(|e| e.to_string())?;
    let started = docker
        .start_exec(
            &exec.id,
            Some(StartExecOptions {
                tty,
                ..Default::default()
            }),
        )
        .await
        .map_err(|e| e.to_string())?;
    match started {
        StartExecResults::Attached { output, input } => Ok((output, input, exec.id)),
        StartExecResults::Detached => Err("docker started the exec detached".into()),
    }
}

async fn exec_code(docker: &Docker, id: &str) -> Result<i64, String> {
    for _ in 0..200 {
        let info = docker.inspect_exec(id).await.map_err(|e| e.to_string())?;
        if info.running != Some(true) {
            return info.exit_code.ok_or_else(|| "no exit code".to_owned());
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    Err("the command's end never came".into())
}

async fn exec_session(
    s: Arc<Shared>,
    socket: WebSocket,
    container: String,
    command: Vec<String>,
    stdin: bool,
    tty: bool,
) {
    let (mut tx, mut rx) = socket.split();
    let started = docker_exec(&s.docker, &container, command, "0:0", None, stdin, tty).await;
    let (mut output, mut input, id) = match started {
        Ok(x) => x,
        Err(e) => {
            let mut msg = vec![3u8];
            msg.extend(serde_json::to_vec(&exit_status(None, Some(e))).unwrap_or_default());
            let _ = tx.send(Message::Binary(msg.into())).await;
            let _ = tx.send(normal_close()).await;
            let _ = tx.close().await;
            return;
        }
    };
    let docker = s.docker.clone();
    let exec_id = id.clone();
    let reader = tokio::spawn(async move {
        while let Some(Ok(m)) = rx.next().await {
            let b = match m {
                Message::Binary(b) => b,
                Message::Close(_) => break,
                _ => continue,
            };
            match b.first() {
                Some(0) => {
                    if input.write_all(&b[1..]).await.is_err() {
                        break;
                    }
                    let _ = input.flush().await;
                }
                Some(255) if b.get(1) == Some(&0) => {
                    let _ = input.shutdown().await;
                }
                Some(4) => {
                    if let Ok(size) = serde_json::from_slice::<Value>(&b[1..]) {
                        let w = size.get("Width").and_then(Value::as_u64).unwrap_or(80);
                        let h = size.get("Height").and_then(Value::as_u64).unwrap_or(24);
                        let _ = docker
                            .resize_exec(
                                &exec_id,
                                ResizeExecOptions {
                                    width: w as u16,
                                    height: h as u16,
                                },
                            )
                            .await;
                    }
                }
                _ => {}
            }
        }
    });
    let mut broken = None;
    while let Some(item) = output.next().await {
        let (ch, data) = match item {
            Ok(bollard::container::LogOutput::StdOut { message })
            | Ok(bollard::container::LogOutput::Console { message }) => (1u8, message),
            Ok(bollard::container::LogOutput::StdErr { message }) => (2u8, message),
            Ok(_) => continue,
            Err(e) => {
                broken = Some(e.to_string());
                break;
            }
        };
        let mut msg = Vec::with_capacity(data.len() + 1);
        msg.push(ch);
        msg.extend_from_slice(&data);
        if tx.send(Message::Binary(msg.into())).await.is_err() {
            break;
        }
    }
    let status = match (broken, exec_code(&s.docker, &id).await) {
        (None, Ok(c)) => exit_status(Some(c), None),
        (b, c) => exit_status(None, b.or(c.err())),
    };
    let mut msg = vec![3u8];
    msg.extend(serde_json::to_vec(&status).unwrap_or_default());
    let _ = tx.send(Message::Binary(msg.into())).await;
    let _ = tx.send(normal_close()).await;
    let _ = tx.close().await;
    reader.abort();
}

// ---- E2B ----

fn e2b_error(code: StatusCode, message: &str) -> Response {
    (
        code,
        axum::Json(json!({"code": code.as_u16(), "message": message})),
    )
        .into_response()
}

/// An IPv4 or IPv6 address, or one with a prefix length.
fn is_cidr(s: &str) -> bool {
    let (addr, prefix) = match s.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (s, None),
    };
    let Ok(ip) = addr.parse::<std::net::IpAddr>() else {
        return false;
    };
    let max = if ip.is_ipv4() { 32 } else { 128 };
    prefix.is_none_or(|p| p.parse::<u8>().is_ok_and(|n| n <= max))
}

/// A host name, or `*.` and one (E2B's domain entries).
fn is_domain(s: &str) -> bool {
    let name = s.strip_prefix("*.").unwrap_or(s);
    !name.is_empty()
        && name.len() <= 253
        && !is_cidr(name)
        && name.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

async fn e2b_create(State(s): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    if headers.get("x-api-key").and_then(|v| v.to_str().ok()) != Some(s.e2b_key.as_str()) {
        return e2b_error(StatusCode::UNAUTHORIZED, "Invalid API key");
    }
    let Ok(req) = serde_json::from_slice::<Value>(&body) else {
        return e2b_error(StatusCode::BAD_REQUEST, "not JSON");
    };
    let Some(template) = req.get("templateID").and_then(Value::as_str) else {
        return e2b_error(StatusCode::BAD_REQUEST, "templateID is required");
    };
    let internet = req
        .get("allow_internet_access")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    // E2B's egress rules (`network.allowOut` / `denyOut`), checked as its API describes them.
    // The fake cannot filter by name: a sandbox whose rules deny all traffic gets no network,
    // whatever they allow.
    let list = |k: &str| -> Result<Vec<String>, String> {
        match req.pointer(&format!("/network/{k}")) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_owned)
                        .ok_or(format!("network.{k}: strings"))
                })
                .collect(),
            Some(_) => Err(format!("network.{k} must be an array")),
        }
    };
    let (allow_out, deny_out) = match (list("allowOut"), list("denyOut")) {
        (Ok(a), Ok(d)) => (a, d),
        (Err(e), _) | (_, Err(e)) => return e2b_error(StatusCode::BAD_REQUEST, &e),
    };
    if let Some(d) = deny_out.iter().find(|d| !is_cidr(d)) {
        return e2b_error(
            StatusCode::BAD_REQUEST,
            &format!("invalid denyOut entry {d:?}: domain names are not supported for deny rules"),
        );
    }
    let denies_all = deny_out.iter().any(|d| d == "0.0.0.0/0");
    if let Some(a) = allow_out.iter().find(|a| !is_cidr(a) && !is_domain(a)) {
        return e2b_error(
            StatusCode::BAD_REQUEST,
            &format!("invalid allowOut entry {a:?}"),
        );
    }
    if allow_out.iter().any(|a| is_domain(a)) && !denies_all {
        return e2b_error(
            StatusCode::BAD_REQUEST,
            "allowOut names domains: denyOut must deny all traffic (0.0.0.0/0)",
        );
    }
    let internet = internet && !denies_all;
    let sandbox = req
        .pointer("/metadata/hangar.sandbox")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let command = [
        "/bin/sh",
        "-c",
        "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done",
    ]
    .map(str::to_owned)
    .to_vec();
    // E2B's default timeout is 300 s.
    let timeout =
        std::time::Duration::from_secs(req.get("timeout").and_then(Value::as_u64).unwrap_or(300));
    let network = if internet { "host" } else { "none" };
    let made = run_container(
        &s,
        Want {
            image: template,
            command,
            env: vec![],
            network,
            sandbox: &sandbox,
            cpu: None,
            memory: None,
        },
    )
    .await;
    let container = match made {
        Ok(c) => c,
        Err(e) => {
            return e2b_error(
                StatusCode::BAD_REQUEST,
                &format!("template '{template}' not found ({e})"),
            );
        }
    };
    let mut rnd = [0u8; 16];
    getrandom(&mut rnd);
    let (id, token) = {
        let mut inner = lock(&s);
        inner.e2b_created.push(req.clone());
        inner.next += 1;
        let id = format!("fk{}{}", inner.next, &hex(&rnd)[..10]);
        let token = hex(&rnd);
        inner.e2b.insert(id.clone(), (container, token.clone()));
        inner
            .e2b_deadline
            .insert(id.clone(), tokio::time::Instant::now() + timeout);
        (id, token)
    };
    tokio::spawn(e2b_expire(Arc::clone(&s), id.clone()));
    (
        StatusCode::CREATED,
        axum::Json(json!({
            "sandboxID": id, "templateID": template, "clientID": "fakecloud",
            "envdVersion": "0.2.0", "envdAccessToken": token,
        })),
    )
        .into_response()
}

/// Kills an E2B sandbox once its deadline has passed, as E2B does at its timeout.
async fn e2b_expire(s: Arc<Shared>, id: String) {
    loop {
        let Some(deadline) = lock(&s).e2b_deadline.get(&id).copied() else {
            return;
        };
        tokio::time::sleep_until(deadline).await;
        let expired = {
            let mut inner = lock(&s);
            match inner.e2b_deadline.get(&id) {
                Some(d) if *d <= tokio::time::Instant::now() => {
                    inner.e2b_deadline.remove(&id);
                    inner.e2b.remove(&id)
                }
                Some(_) => continue,
                None => return,
            }
        };
        if let Some((c, _)) = expired {
            remove(&s.docker, &c).await;
        }
        return;
    }
}

/// `POST /sandboxes/{id}/timeout` (`{"timeout": SECONDS}`): the sandbox now expires that long
/// from now.
async fn e2b_timeout(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
    body: Bytes,
) -> Response {
    if headers.get("x-api-key").and_then(|v| v.to_str().ok()) != Some(s.e2b_key.as_str()) {
        return e2b_error(StatusCode::UNAUTHORIZED, "Invalid API key");
    }
    let Some(secs) = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v.get("timeout").and_then(Value::as_u64))
    else {
        return e2b_error(StatusCode::BAD_REQUEST, "timeout is required");
    };
    let mut inner = lock(&s);
    if !inner.e2b.contains_key(&id) {
        return e2b_error(StatusCode::NOT_FOUND, &format!("sandbox {id} not found"));
    }
    inner.e2b_deadline.insert(
        id,
        tokio::time::Instant::now() + std::time::Duration::from_secs(secs),
    );
    StatusCode::NO_CONTENT.into_response()
}

async fn e2b_kill(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
) -> Response {
    if headers.get("x-api-key").and_then(|v| v.to_str().ok()) != Some(s.e2b_key.as_str()) {
        return e2b_error(StatusCode::UNAUTHORIZED, "Invalid API key");
    }
    let gone = {
        let mut inner = lock(&s);
        inner.e2b_deadline.remove(&id);
        inner.e2b.remove(&id)
    };
    match gone {
        Some((c, _)) => {
            remove(&s.docker, &c).await;
            StatusCode::NO_CONTENT.into_response()
        }
        None => e2b_error(StatusCode::NOT_FOUND, &format!("sandbox {id} not found")),
    }
}

/// The sandbox's container, when the request carries its envd token.
fn envd_auth(s: &Shared, id: &str, headers: &HeaderMap) -> Result<String, Box<Response>> {
    let inner = lock(s);
    let Some((c, token)) = inner.e2b.get(id) else {
        return Err(Box::new(e2b_error(
            StatusCode::BAD_GATEWAY,
            &format!("The sandbox {id} was not found"),
        )));
    };
    if headers.get("x-access-token").and_then(|v| v.to_str().ok()) != Some(token.as_str()) {
        return Err(Box::new(e2b_error(
            StatusCode::UNAUTHORIZED,
            "invalid access token",
        )));
    }
    Ok(c.clone())
}

fn envd_user(headers: &HeaderMap) -> String {
    let user = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic "))
        .and_then(|b| B64.decode(b).ok())
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .and_then(|u| u.split(':').next().map(str::to_owned))
        .unwrap_or_else(|| "user".into());
    if user == "root" { "0:0".into() } else { user }
}

fn envelope(flags: u8, v: &Value) -> Bytes {
    let msg = serde_json::to_vec(v).unwrap_or_default();
    let mut out = Vec::with_capacity(msg.len() + 5);
    out.push(flags);
    out.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    out.extend_from_slice(&msg);
    out.into()
}

async fn envd_start(
    State(s): State<Arc<Shared>>,
    UrlPath(id): UrlPath<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let container = match envd_auth(&s, &id, &headers) {
        Ok(c) => c,
        Err(r) => return *r,
    };
    if headers.get("content-type").and_then(|v| v.to_str().ok()) != Some("application/connect+json")
    {
        return e2b_error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Start is a server stream: application/connect+json",
        );
    }
    let req = body
        .get(5..)
        .and_then(|m| serde_json::from_slice::<Value>(m).ok())
        .unwrap_or(Value::Null);
    let Some(cmd) = req.pointer("/process/cmd").and_then(Value::as_str) else {
        return e2b_error(StatusCode::BAD_REQUEST, "process.cmd is required");
    };
    let mut command = vec![cmd.to_owned()];
    command.extend(
        req.pointer("/process/args")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|a| a.as_str().map(str::to_owned)),
    );
    let cwd = req
        .pointer("/process/cwd")
        .and_then(Value::as_str)
        .map(str::to_owned);
    // A PTY process (what the SDKs' `pty.create` and `hangar sb attach` start): a terminal of
    // the given size, always taking input.
    let pty = req.pointer("/pty/size").map(|size| {
        let dim = |k: &str| {
            size.get(k)
                .and_then(Value::as_u64)
                .unwrap_or(0)
                .clamp(1, 1000) as u16
        };
        (dim("cols"), dim("rows"))
    });
    let stdin = pty.is_some() || req.get("stdin").and_then(Value::as_bool).unwrap_or(false);
    let user = envd_user(&headers);
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    let started = docker_exec(
        &s.docker,
        &container,
        command,
        &user,
        cwd,
        stdin,
        pty.is_some(),
    )
    .await;
    let (mut output, input, exec_id) = match started {
        Ok(x) => x,
        Err(e) => {
            let _ = tx
                .send(Ok(envelope(
                    2,
                    &json!({"error": {"code": "internal", "message": e}}),
                )))
                .await;
            drop(tx);
            return stream_response(rx);
        }
    };
    // Subscribed before the process's first event is sent: Start's stream misses nothing.
    let (hub, first) = tokio::sync::broadcast::channel::<Bytes>(1024);
    drop(tx);
    let pid = {
        let mut inner = lock(&s);
        inner.next += 1;
        let pid = inner.next;
        inner.events.insert(pid, hub.clone());
        if stdin {
            inner
                .stdin
                .insert(pid, Arc::new(tokio::sync::Mutex::new(Some(input))));
        }
        if pty.is_some() {
            inner.ptys.insert(pid, exec_id.clone());
        }
        pid
    };
    if let Some((width, height)) = pty {
        let _ = s
            .docker
            .resize_exec(&exec_id, ResizeExecOptions { width, height })
            .await;
    }
    let out_key = if pty.is_some() { "pty" } else { "stdout" };
    // The process's output is read whether or not a stream is on it (nobody's: dropped).
    tokio::spawn(async move {
        let _ = hub.send(envelope(0, &json!({"event": {"start": {"pid": pid}}})));
        let mut broken = None;
        while let Some(item) = output.next().await {
            let (k, data) = match item {
                Ok(bollard::container::LogOutput::StdOut { message })
                | Ok(bollard::container::LogOutput::Console { message }) => (out_key, message),
                Ok(bollard::container::LogOutput::StdErr { message }) => ("stderr", message),
                Ok(_) => continue,
                Err(e) => {
                    broken = Some(e.to_string());
                    break;
                }
            };
            let ev = json!({"event": {"data": {k: B64.encode(&data)}}});
            let _ = hub.send(envelope(0, &ev));
        }
        {
            let mut inner = lock(&s);
            inner.stdin.remove(&pid);
            inner.ptys.remove(&pid);
            inner.events.remove(&pid);
        }
        let end = match (broken, exec_code(&s.docker, &exec_id).await) {
            (None, Ok(0)) => json!({"exited": true, "status": "exit status 0"}),
            (None, Ok(c)) => {
                json!({"exitCode": c, "exited": true, "status": format!("exit status {c}")})
            }
            (_, _) => json!({"exitCode": -1, "status": "signal: killed"}),
        };
        let _ = hub.send(envelope(0, &json!({"event": {"end": end}})));
        let _ = hub.send(envelope(2, &json!({})));
    });
    events_response(None, first)
}

/// envd's `Connect`: a stream on a running process (`process.pid`), its `start` first, then
/// what it prints from now on and its end, as `Start`'s stream has them. A process that has
/// ended (or never was) is a `not_found` error.
async fn envd_connect(
    State(s): State<Arc<Shared>>,
    UrlPath(id): UrlPath<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(r) = envd_auth(&s, &id, &headers) {
        return *r;
    }
    if headers.get("content-type").and_then(|v| v.to_str().ok()) != Some("application/connect+json")
    {
        return e2b_error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Connect is a server stream: application/connect+json",
        );
    }
    let req = body
        .get(5..)
        .and_then(|m| serde_json::from_slice::<Value>(m).ok())
        .unwrap_or(Value::Null);
    let pid = process_pid(&req);
    let Some(rx) = lock(&s).events.get(&pid).map(|h| h.subscribe()) else {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(1);
        let _ = tx.try_send(Ok(envelope(
            2,
            &json!({"error": {"code": "not_found", "message": format!("process with pid {pid} not found")}}),
        )));
        return stream_response(rx);
    };
    events_response(
        Some(envelope(0, &json!({"event": {"start": {"pid": pid}}}))),
        rx,
    )
}

/// A server stream of a process's events (after `first`, if any), until its end of stream. A
/// reader that falls behind skips what it missed, as a terminal that was away would.
fn events_response(first: Option<Bytes>, rx: tokio::sync::broadcast::Receiver<Bytes>) -> Response {
    let (tx, out) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    tokio::spawn(async move {
        let mut rx = rx;
        if let Some(f) = first
            && tx.send(Ok(f)).await.is_err()
        {
            return;
        }
        loop {
            match rx.recv().await {
                Ok(b) => {
                    let last = b.first() == Some(&2);
                    if tx.send(Ok(b)).await.is_err() || last {
                        return;
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    });
    stream_response(out)
}

fn stream_response(rx: tokio::sync::mpsc::Receiver<Result<Bytes, std::io::Error>>) -> Response {
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/connect+json")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

fn connect_error(code: StatusCode, kind: &str, message: &str) -> Response {
    (code, axum::Json(json!({"code": kind, "message": message}))).into_response()
}

/// The `process.pid` a process call names (0, no process, if none).
fn process_pid(req: &Value) -> u64 {
    req.pointer("/process/pid")
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

async fn envd_input(
    State(s): State<Arc<Shared>>,
    UrlPath(id): UrlPath<String>,
    headers: HeaderMap,
    axum::Json(req): axum::Json<Value>,
) -> Response {
    if let Err(r) = envd_auth(&s, &id, &headers) {
        return *r;
    }
    let pid = process_pid(&req);
    let Some(data) = req
        .pointer("/input/stdin")
        .or_else(|| req.pointer("/input/pty"))
        .and_then(Value::as_str)
        .and_then(|b| B64.decode(b).ok())
    else {
        return connect_error(
            StatusCode::BAD_REQUEST,
            "invalid_argument",
            "input.stdin or input.pty",
        );
    };
    let Some(w) = lock(&s).stdin.get(&pid).cloned() else {
        return connect_error(StatusCode::NOT_FOUND, "not_found", "no such process");
    };
    let mut w = w.lock().await;
    if let Some(w) = w.as_mut() {
        let _ = w.write_all(&data).await;
        let _ = w.flush().await;
    }
    axum::Json(json!({})).into_response()
}

async fn envd_close(
    State(s): State<Arc<Shared>>,
    UrlPath(id): UrlPath<String>,
    headers: HeaderMap,
    axum::Json(req): axum::Json<Value>,
) -> Response {
    if let Err(r) = envd_auth(&s, &id, &headers) {
        return *r;
    }
    let pid = process_pid(&req);
    let Some(w) = lock(&s).stdin.get(&pid).cloned() else {
        return connect_error(StatusCode::NOT_FOUND, "not_found", "no such process");
    };
    if let Some(mut w) = w.lock().await.take() {
        let _ = w.shutdown().await;
    }
    axum::Json(json!({})).into_response()
}

/// `SendSignal`: SIGKILL or SIGTERM to a process.
async fn envd_signal(
    State(s): State<Arc<Shared>>,
    UrlPath(id): UrlPath<String>,
    headers: HeaderMap,
    axum::Json(req): axum::Json<Value>,
) -> Response {
    if let Err(r) = envd_auth(&s, &id, &headers) {
        return *r;
    }
    let pid = process_pid(&req);
    let signal = match req.get("signal").and_then(Value::as_str) {
        Some("SIGNAL_SIGKILL") => "KILL",
        Some("SIGNAL_SIGTERM") => "TERM",
        _ => {
            return connect_error(
                StatusCode::BAD_REQUEST,
                "invalid_argument",
                "signal: SIGNAL_SIGKILL or SIGNAL_SIGTERM",
            );
        }
    };
    let Some(exec) = lock(&s).ptys.get(&pid).cloned() else {
        return connect_error(StatusCode::NOT_FOUND, "not_found", "no such PTY process");
    };
    let host_pid = match s.docker.inspect_exec(&exec).await {
        Ok(info) => info.pid.unwrap_or(0),
        Err(e) => {
            return connect_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                &e.to_string(),
            );
        }
    };
    if host_pid <= 0 {
        // Already over.
        return axum::Json(json!({})).into_response();
    }
    let killed = tokio::process::Command::new("kill")
        .args([format!("-{signal}"), host_pid.to_string()])
        .status()
        .await;
    match killed {
        Ok(st) if st.success() => axum::Json(json!({})).into_response(),
        other => connect_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            &format!("kill {host_pid}: {other:?}"),
        ),
    }
}

/// `Update`: a PTY process's new size.
async fn envd_update(
    State(s): State<Arc<Shared>>,
    UrlPath(id): UrlPath<String>,
    headers: HeaderMap,
    axum::Json(req): axum::Json<Value>,
) -> Response {
    if let Err(r) = envd_auth(&s, &id, &headers) {
        return *r;
    }
    let pid = process_pid(&req);
    let Some(size) = req.pointer("/pty/size") else {
        // Nothing to change.
        return axum::Json(json!({})).into_response();
    };
    let dim = |k: &str| {
        size.get(k)
            .and_then(Value::as_u64)
            .unwrap_or(0)
            .clamp(1, 1000) as u16
    };
    let Some(exec) = lock(&s).ptys.get(&pid).cloned() else {
        return connect_error(StatusCode::NOT_FOUND, "not_found", "no such PTY process");
    };
    match s
        .docker
        .resize_exec(
            &exec,
            ResizeExecOptions {
                width: dim("cols"),
                height: dim("rows"),
            },
        )
        .await
    {
        Ok(()) => axum::Json(json!({})).into_response(),
        Err(e) => connect_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            &e.to_string(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_decode_repeated_keys() {
        let q = query_pairs("command=sh&command=-c&command=echo%20a+b&stdin=true&x");
        assert_eq!(
            q,
            [
                ("command".into(), "sh".into()),
                ("command".into(), "-c".into()),
                ("command".into(), "echo a b".into()),
                ("stdin".into(), "true".into()),
                ("x".into(), String::new()),
            ]
        );
    }
}
