// The API's types for the web page, generated from hangar-api's JSON Schemas by
// hangar-server's typedefs.rs. Do not edit: regenerate with
// `HANGAR_WRITE_OPENAPI=1 cargo test -p hangar-server openapi`.

/** `POST /v1/people` (admins only). */
export interface AddPerson {
  email: string;
  /** Default: member. */
  role?: Role | null;
}

/** An answer to a permission request. */
export interface Answer {
  decision: Decision;
  /** Run the tool with this input instead of the one the agent asked for. */
  input?: Record<string, unknown> | null;
  /** Why (a denial's reason, told to the agent). */
  reason?: string | null;
}

/** A permission request of the agent's. */
export interface Approval {
  answered_at: number | null;
  answered_by: string | null;
  decision: Decision | null;
  input: Record<string, unknown>;
  request_id: string;
  requested_at: number;
  run_id: string;
  tool_name: string;
}

/** A run with a request waiting, in `GET /v1/approvals`. */
export interface ApprovalRun {
  /** The sandbox's environment (whose `governance.approvers` may answer too). */
  environment: string;
  /** The run's owner (the person of its sandbox). */
  person: string;
  run_id: string;
  session_id: string;
  turn_id: string;
}

/** `GET /v1/runs/{id}/approvals`: the requests waiting for an answer. */
export interface Approvals {
  approvals: Approval[];
}

/**
 * How to attach: a command for this machine (`argv`), or (e2b) a terminal this server relays
 * (`attach`, kept alive every `keepalive_secs`).
 */
export interface AttachAnswer {
  argv: string[];
  attach?: string | null;
  keepalive_secs?: number | null;
  run: string;
}

/** Server-Sent Events: `data` (base64 of the terminal's bytes), `end` ({status}: the process ended; tmux's 0 when the person detached), `ended` ({reason}: the attach ended otherwise, its process killed) */
export interface AttachEvent {
  data: string;
  event?: AttachEventKind | null;
  id?: string | null;
}

/** The kinds of a relayed terminal's events. */
export type AttachEventKind = "data" | "end" | "ended";

/** Typing into a relayed terminal. */
export interface AttachInput {
  /** base64 of the bytes typed; empty: a keepalive */
  data?: string;
}

/** The attach an action was about. */
export interface AttachOne {
  attach: string;
}

/** `POST /v1/sandboxes/{id}/attach`. */
export interface AttachRequest {
  /** the terminal's columns, default 80 (1 to 1000) */
  cols?: number | null;
  /** the terminal's rows, default 24 (1 to 1000) */
  rows?: number | null;
  /** the run to attach to (default: the sandbox's running turn) */
  run?: string | null;
  /** the terminal type (TERM), default xterm-256color: letters, digits and .+-_, at most 64 */
  term?: string | null;
}

/** A relayed terminal's new size. */
export interface AttachResize {
  /** the terminal's columns (1 to 1000) */
  cols: number;
  /** the terminal's rows (1 to 1000) */
  rows: number;
}

/** One record of the hash-chained audit log. */
export interface AuditRecord {
  action: string;
  actor: string;
  at: number;
  /** A JSON object, as text (what the hash covers). */
  detail: string;
  hash: string;
  seq: number;
}

/** `GET /v1/audit`. */
export interface AuditRecords {
  records: AuditRecord[];
}

/** `GET /v1/audit/verify`: whether the chain holds (`records` checked), else the `error`. */
export interface AuditVerify {
  error?: string | null;
  ok: boolean;
  records?: number | null;
}

/** `GET /v1/auth` (no token): how a person signs in to this server. */
export interface AuthConfig {
  /**
   * The OpenID Connect issuer, when this server signs people in with one; absent, only tokens
   * made with `hangar token create` work.
   */
  oidc?: OidcIssuer | null;
}

/** `GET /v1/board`: sessions with a request waiting first, then the newest. */
export interface Board {
  sessions: BoardRow[];
}

/** One row of the board: a session with its sandbox, person, turns, state, tokens, cost, fork. */
export interface BoardRow {
  cost_usd: number | null;
  /** Milliseconds since the Unix epoch, as every time in the API. */
  created_at: number;
  /** the fork's record (as in POST /v1/runs/{id}/fork) when the session was made as one */
  fork: ForkRecord | null;
  harness: Harness;
  /** The harness's own session (Claude Code) or thread (Codex), once it has one. */
  harness_session_id: string | null;
  id: string;
  options: TurnOptions;
  person: string | null;
  /** The latest turn's phase (`waiting` first on the board). */
  phase: TurnPhase | null;
  policy: Policy;
  sandbox: SandboxBrief | null;
  sandbox_id: string;
  /** The latest turn's state. */
  state: TurnState | null;
  turn_count: number;
  turns: TurnSummary[];
  usage: Usage;
  /** Permission requests that wait for an answer in the session's running turn. */
  waiting: number;
}

/** What a provider can do for an environment, as governance needs to know it. */
export interface Capabilities {
  network_modes: NetworkMode[];
  provider: Provider;
  /** Whether resource limits are enforced. */
  resource_limits: boolean;
  /** The agent can become root. */
  sudo: boolean;
  /** The agent runs as a uid of its own, the driver as hangar's user. */
  uid_split: boolean;
  /** Why there is no split, when there is none. */
  uid_split_off?: string | null;
}

/**
 * A command's answer once the driver signed `done`: `done` (taken into the running turn) or
 * `next_turn` (the turn had ended; the message started the next one, `turn`).
 */
export interface CommandReply {
  outcome: Outcome;
  run: string;
  turn?: string | null;
}

/** where the conversation was cut: `parent` (the harness's session or thread, none for a new conversation), `at` (the last message or turn kept), `exact`, and `why` when not exact */
export interface Conversation {
  at: string | null;
  exact: boolean;
  parent: string | null;
  why?: string;
}

/** `POST /v1/sandboxes`. */
export interface CreateSandbox {
  env: string;
  /** The person it is for (default: the token's). */
  person?: string | null;
  repo: string;
}

/** `POST /v1/tokens`: a token for yourself, or (admins only) for another person. */
export interface CreateToken {
  /**
   * How long it lives: a number and `d`, `h` or `m` (`90d`, `12h`, `30m`), at most 365 days
   * (default 90 days); tokens that never expire are refused.
   */
  expires?: string | null;
  /** What to call it. */
  name?: string | null;
  /** Whom it is for (default: the caller; another person only for an admin). */
  person?: string | null;
}

/** `GET /v1/credentials`: the names, never the values. */
export interface CredentialNames {
  credentials: string[];
}

/** The credential removed. */
export interface CredentialRemoved {
  removed: string;
}

/** The credential set. */
export interface CredentialSet {
  name: string;
}

/** A credential's value. */
export interface CredentialValue {
  value: string;
}

/** How finely a harness's conversation can be cut for a fork. */
export type Cut = "message" | "turn";

/** A person's answer to a permission request (`approve` is taken for `allow`). */
export type Decision = "allow" | "deny";

/** `POST /v1/auth/device/poll`. */
export interface DevicePoll {
  flow: string;
}

/**
 * The answer to a poll: `signed_in` once the person has approved at the issuer, absent while
 * they have not (poll again).
 */
export interface DevicePolled {
  signed_in?: SignedIn | null;
}

/**
 * `POST /v1/auth/device` (no body): begin a device sign-in. Show `verification_uri` and
 * `user_code`, then poll with `flow`.
 */
export interface DeviceStarted {
  /** Seconds the code lives. */
  expires_in: number;
  flow: string;
  user_code: string;
  verification_uri: string;
  /** The same with the code filled in, when the issuer gives one. */
  verification_uri_complete?: string | null;
}

/** `GET /v1/runs/{id}/diff`: what changed from one step to another. */
export interface Diff {
  files: FileChange[];
  from: Step;
  /** `git diff`'s patch. */
  patch: string;
  to: Step;
}

/** An environment as the API shows it. */
export interface Environment {
  created_at: number;
  /** Why the stored spec does not validate any more, if it does not. */
  invalid?: string | null;
  name: string;
  /** The validated spec, as a person would write it. */
  spec: EnvironmentSpec;
  updated_at?: number | null;
}

/** An environment applied: `created` (201) or replaced (200). */
export interface EnvironmentApplied {
  created: boolean;
  environment: Environment;
}

/** One environment. */
export interface EnvironmentOne {
  environment: Environment;
}

/** An environment as a person writes it (the YAML file's keys); unknown keys and impossible combinations are refused with a message naming the key */
export interface EnvironmentSpec {
  egress?: "none" | "open" | {
    allowlist: string[];
  };
  governance?: {
    /** reviewed Claude Code settings: mcpServers, model, permissions.deny/ask, includeCoAuthoredBy, alwaysThinkingEnabled, outputStyle, cleanupPeriodDays; any other key is refused */
    claude_settings?: Record<string, unknown>;
    hook?: "required" | "optional" | "off";
    policy?: "ask" | "auto" | "governed";
    rules?: Record<string, unknown>;
  };
  image?: string;
  name: string;
  network?: "host";
  provider: "local" | "docker" | "kubernetes" | "e2b";
  resources?: {
    cpu?: number;
    memory?: string | number;
    pids?: number;
  };
  sudo?: boolean;
  uid_split?: boolean;
}

/** `GET /v1/environments`. */
export interface Environments {
  environments: Environment[];
}

/** Every error answer. */
export interface Error {
  error: ErrorDetail;
}

/** An error's kind; each maps to one HTTP status. */
export type ErrorCode = "unauthenticated" | "forbidden" | "not_found" | "bad_request" | "unsupported_media_type" | "method_not_allowed" | "conflict" | "refused" | "unavailable" | "internal";

/** What went wrong: a kind and a message a person can act on. */
export interface ErrorDetail {
  code: ErrorCode;
  message: string;
}

/** A stored progress event. */
export interface Event {
  created_at: number;
  id: number;
  kind: string;
  payload: Record<string, unknown>;
  run_id: string | null;
  session_id: string;
}

/** A page of events. */
export interface Events {
  events: Event[];
  /** The cursor for the next page (`after`); null when this one is empty. */
  next_after: number | null;
}

/** Whom a command in a sandbox runs as. */
export type ExecAs = "agent" | "hangar";

/** A command's end. */
export interface ExecOutput {
  /** Its exit status (128 + signal when killed). */
  status: number;
  stderr: string;
  stdout: string;
}

/** `POST /v1/sandboxes/{id}/exec`. */
export interface ExecRequest {
  argv: string[];
  as?: ExecAs;
  /** Text for the command's stdin. */
  stdin?: string | null;
}

/** One file changed between two steps; `added`/`deleted` lines are null for binary files. */
export interface FileChange {
  added: number | null;
  deleted: number | null;
  path: string;
}

/** how exactly this harness can cut a conversation: `cut` is `message` (any step) or `turn` (between turns only) */
export interface ForkCapability {
  cut: Cut;
  exact_at_every_step: boolean;
  harness: string;
  how: string;
}

/** A fork's record: what it was made from and how exactly. */
export interface ForkRecord {
  capability: ForkCapability;
  conversation: Conversation;
  dir: string;
  head: string | null;
  repository: boolean;
  run: string;
  sandbox: string;
  session: string;
  source_session: string;
  step: number;
  tree: string;
  trusted: boolean;
  turn: string;
  warnings: string[];
}

/** `POST /v1/runs/{id}/fork`. */
export interface ForkRequest {
  /** the fork's work tree on this machine, for a plain folder's or an in-place sandbox's fork (absolute; must not exist or be empty); default $HANGAR_HOME/forks/<sandbox id>. A run in a sandbox whose environment copies the repository forks into a new sandbox of that environment, whose workspace is the work tree: dir is refused there */
  dir?: string | null;
  /** start the fork's first turn with this message */
  prompt?: string | null;
  step: number;
}

/** What a fork made (`turn` and `run` when it was given a prompt). */
export interface Forked {
  fork: ForkRecord;
  run?: Run | null;
  sandbox: SandboxBrief;
  session: Session;
  turn?: Turn | null;
}

/** `GET /v1/runs/{id}/forks`. */
export interface Forks {
  forks: ForkRecord[];
  run: string;
}

export type Harness = "claude" | "codex";

/** `GET /v1/health`. */
export interface Health {
  ok: boolean;
  version: string;
}

/** `GET /v1/ids/{prefix}`: the one id a prefix names, among those the person may read. */
export interface IdInfo {
  /** The whole id. */
  id: string;
  /** `run`, `session`, `turn` or `sandbox`. */
  kind: string;
  /** Its shortest unique prefix (at least `KIND-` and six hex digits), what hints print. */
  short: string;
}

/** One public key (a JWK). */
export interface Jwk {
  alg?: string | null;
  crv?: string | null;
  kid: string;
  kty: string;
  use?: string | null;
  x?: string | null;
}

/** `GET /.well-known/jwks.json`. */
export interface Jwks {
  keys: Jwk[];
}

/** `GET /v1/runs/{id}/log`: complete run-log lines from a byte offset. */
export interface LogPage {
  /** The run has ended and every line is read. */
  ended: boolean;
  lines: string[];
  next_offset: number;
  /** the run's log is one the agent could not have written (sealed, and the agent could not learn the run key); when false the assistant's text is not known to be the model's */
  verified: boolean;
  /** why the log is not verified */
  why?: string | null;
}

/** `GET /v1/me`. */
export interface Me {
  person: string;
  /** What they may do. */
  role: Role;
  /** The id of the token this request carried (what signing out revokes). */
  token_id: string;
}

/** How a sandbox may reach the network. */
export type NetworkMode = "none" | "host" | "open" | "allowlist";

/** `POST /v1/auth/oidc/finish`: the callback's `code` and `state`, with the flow they belong to. */
export interface OidcFinish {
  code: string;
  flow: string;
  state: string;
}

/** The issuer this server trusts. */
export interface OidcIssuer {
  /** Whether `hangar login` can use the device flow with it. */
  device_flow: boolean;
  /** Its URL (`iss`). */
  issuer: string;
  /** What to call it on a button: its host name. */
  name: string;
}

/** `POST /v1/auth/oidc/start`: begin a web sign-in. */
export interface OidcStart {
  /**
   * Where the issuer sends the browser back: this server's `/ui/signin/callback` as the page
   * sees it (the issuer checks it against the client's registered URIs). A server started with
   * `--public-url` sends its own public callback instead.
   */
  redirect_uri: string;
}

/**
 * A web sign-in begun: send the browser to `authorize_url`, keep `flow` and `state` (the page's
 * own session storage) for the callback.
 */
export interface OidcStarted {
  authorize_url: string;
  flow: string;
  state: string;
}

/** What a command (a message, steer, interrupt or answer) did, when the driver signed `done`. */
export type Outcome = "done" | "next_turn";

/**
 * `GET /v1/approvals`: every permission request waiting for a person, across the live runs,
 * oldest first (what a person or a notifier watches, without knowing the runs).
 */
export interface PendingApprovals {
  approvals: Approval[];
  /** How many runs are live (each may come to wait for a person). */
  live_runs: number;
  /**
   * Where each run of `approvals` belongs (its turn, session and owner), so an inbox can say
   * whose work waits without reading the turn (which an environment's approver may not).
   */
  runs?: ApprovalRun[];
}

/** `GET /v1/people`: the people who are in, by email. */
export interface People {
  people: Person[];
}

/** A person of the team. */
export interface Person {
  /** When they were added (ms since the epoch). */
  created_at: number;
  email: string;
  id: string;
  role: Role;
}

/** One person. */
export interface PersonOne {
  person: Person;
}

/** `DELETE /v1/people/{email}`: removed, and every token of theirs revoked. */
export interface PersonRemoved {
  removed: string;
}

/** Where in a turn a step's tree was taken, when not after a tool call. */
export type Phase = "start" | "end";

export type Policy = "ask" | "auto" | "governed";

/** Where sandboxes of an environment run. */
export type Provider = "local" | "docker" | "kubernetes" | "e2b";

/** Server-Sent Events of `POST /v1/environments/{name}/pull`: `progress` ({line}: one line of the pull, a layer's change of state or how far it got), then one `done` ({environment, image, pulled}: the image is on the machine; `pulled` false when it already was) or `failed` ({message}: why, naming the image and what the registry said) */
export interface PullEvent {
  data: string;
  event?: PullEventKind | null;
  id?: string | null;
}

/** The kinds of a pull's events. */
export type PullEventKind = "progress" | "done" | "failed";

/** `GET /v1/ready`: the server can serve (its database answers); a 503 error otherwise. */
export interface Ready {
  ready: boolean;
  /** The schema version the database is at. */
  schema: number;
  version: string;
}

/**
 * What a person may do: an admin adds and removes people, sees and revokes anyone's tokens and
 * may act for another person; a member acts as themselves only; a viewer reads the team's work
 * (sessions, runs, transcripts, pending approvals) and acts on nothing.
 */
export type Role = "admin" | "member" | string;

/** One driver process executing one turn. */
export interface Run {
  created_at: number;
  driver_pid: number | null;
  ended_at: number | null;
  /** Whether the control plane still holds the run's key (commands can be sent). */
  has_key: boolean;
  id: string;
  /** how the run's log is read: `sealed` (only what the driver's seals cover is taken), `trusted` (the agent could not have written it; when false the assistant's text is marked unverified), `why` (when not trusted); null until the watcher has started on it */
  log: Record<string, unknown> | null;
  /** How far into the run log the events are stored (bytes). */
  log_cursor: number;
  state: RunState;
  turn_id: string;
}

/** Whether a run's driver may still write to its log. */
export type RunState = "live" | "ended";

/** A sandbox as the API shows it. */
export interface Sandbox {
  capabilities?: Capabilities | null;
  created_at: number;
  /** What its egress allowlist does not keep, when that is weaker than hangar's proxy. */
  egress_warning?: string | null;
  environment: string;
  /** The work tree on this machine. */
  host_workspace: string;
  id: string;
  person: string;
  provider: Provider;
  removed_at?: number | null;
  state: SandboxState;
  /** The work tree inside the sandbox. */
  workspace?: string | null;
}

/** A sandbox as a fork's answer and the board name it. */
export interface SandboxBrief {
  environment: string;
  id: string;
  /** Its provider. */
  kind: string;
  person: string;
  /** Its work tree on this machine. */
  workdir: string;
}

/** One sandbox. */
export interface SandboxOne {
  sandbox: Sandbox;
}

/** Whether a sandbox is still there. */
export type SandboxState = "live" | "removed";

/** `GET /v1/sandboxes`. */
export interface Sandboxes {
  sandboxes: Sandbox[];
}

/** A conversation with one harness in one sandbox, made of turns. */
export interface Session {
  /** Milliseconds since the Unix epoch, as every time in the API. */
  created_at: number;
  harness: Harness;
  /** The harness's own session (Claude Code) or thread (Codex), once it has one. */
  harness_session_id: string | null;
  id: string;
  options: TurnOptions;
  policy: Policy;
  sandbox_id: string;
  turn_count: number;
}

/** `GET /v1/sessions/{id}`: a session and its turns. */
export interface SessionTurns {
  session: Session;
  turns: Turn[];
}

/** `GET /v1/sessions`. */
export interface Sessions {
  sessions: Session[];
}

/** A sign-in that ended in a token (its only copy). */
export interface SignedIn {
  /** Whether the person was added by this sign-in (as a member). */
  added: boolean;
  /** When the token stops working (ms since the epoch). */
  expires_at: number;
  person: string;
  role: Role;
  token: string;
  /** The token's id (what `DELETE /v1/tokens/{id}` revokes at sign-out). */
  token_id: string;
}

/** `POST /v1/sessions`: a session and its first turn. */
export interface StartSession {
  /** The folder (required unless `sandbox` is given). */
  dir?: string | null;
  /**
   * An environment to make a sandbox of (a copy of `dir`); without it and `sandbox`, the
   * in-place local sandbox on `dir`.
   */
  env?: string | null;
  harness?: Harness;
  /** Run in `dir` itself, unsandboxed, as the server's user (only where the server allows it). */
  no_sandbox?: boolean;
  options?: TurnOptions;
  /** Default: the environment's `governance.policy`, else `ask`. */
  policy?: Policy | null;
  prompt: string;
  /** An existing sandbox to run in. */
  sandbox?: string | null;
}

/** What starting a session made. */
export interface Started {
  run: Run;
  session: Session;
  turn: Turn;
}

/** One step of a run: a tree the driver recorded. */
export interface Step {
  /** The stored event's id. */
  event_id: number;
  phase?: Phase | null;
  /** What the driver did not hash, and why. */
  skipped?: unknown;
  /** 0 for the first tree of the run (its start), then one more per tree. */
  step: number;
  /** The tool call the tree followed, or none for a phase. */
  tool_use_id?: string | null;
  tree: string;
  trusted: boolean;
}

/** `GET /v1/runs/{id}/steps`. */
export interface Steps {
  run: string;
  steps: Step[];
}

/** One Server-Sent Event of a live stream. */
export interface StreamEvent {
  /** its JSON payload */
  data: string;
  /** its kind */
  event?: string | null;
  /** the event id (resume with Last-Event-ID) */
  id?: string | null;
}

/** A message, a steer. */
export interface Text {
  text: string;
}

/** The token just made: shown once, only its hash is kept. */
export interface TokenCreated {
  expires_at: number;
  id: string;
  name: string;
  person: string;
  /** The bearer token; this is its only copy. */
  token: string;
}

/** A token as lists show it: never the token, never its hash. */
export interface TokenInfo {
  /** Times are ms since the epoch. */
  created_at: number;
  expires_at?: number | null;
  id: string;
  /** When it was last used, to the minute. */
  last_used_at?: number | null;
  /** What its person called it (empty when unnamed). */
  name: string;
  person: string;
  revoked_at?: number | null;
}

/** `DELETE /v1/tokens/{id}`. */
export interface TokenRevoked {
  revoked: string;
}

/** `GET /v1/tokens`: your tokens (everyone's for an admin), oldest first. */
export interface Tokens {
  tokens: TokenInfo[];
}

/** `GET /v1/sessions/{id}/transcript`: the session's conversation. */
export interface Transcript {
  entries: (Record<string, unknown>)[];
  session: string;
}

/** A turn, with its manifest. */
export interface Turn {
  /** Its cost in US dollars, when known. */
  cost_usd: number | null;
  created_at: number;
  ended_at: number | null;
  /** a one-shot turn's start and end trees (S29): {start, end, trusted: false}; null for turns the driver ran (their trees are `tree` events) */
  git_trees: Record<string, unknown> | null;
  id: string;
  index: number;
  /** What the turn ran with (harness, version, policy, sandbox, ...), once it started. */
  manifest: Record<string, unknown> | null;
  /**
   * How it is doing or how it ended, in the words the CLI and the board show: `waiting` while
   * a permission request waits, then `succeeded`, `failed`, `interrupted`, `blocked` or
   * `verify_failed`.
   */
  phase: TurnPhase;
  /**
   * The phase in a line: why it failed or was refused, which call blocked it, how many
   * requests wait.
   */
  phase_detail: string | null;
  prompt: string;
  /** Why it ended or was refused, in words. */
  reason: string | null;
  run_id: string | null;
  session_id: string;
  started_at: number | null;
  state: TurnState;
  /** The harness's exit status, once ended. */
  status: number | null;
  usage: Usage;
  /** The job's check's state. */
  verify_state: string | null;
  /** Permission requests of its run that wait for an answer. */
  waiting: number;
}

/** `GET /v1/turns/{id}/audit`: the records about one turn. */
export interface TurnAudit {
  records: AuditRecord[];
  turn: string;
}

/** How a session's turns run; kept on the session, so every turn runs the same way. */
export interface TurnOptions {
  /** Codex `-c KEY=VALUE` overrides. */
  codex_config?: string[];
  /** How many times a failed check sends the agent back. */
  max_verify_rounds?: number | null;
  /** The model the harness asks for. */
  model?: string | null;
  /** Seconds the harness waits for the model. */
  model_timeout?: number | null;
  /** run a harness version whose conformance suite has not passed (the manifest records it) */
  unverified_harness?: boolean;
  /** The job's check: a command run when the agent says it is done. */
  verify?: string | null;
}

/** How a turn is doing or how it ended: `waiting` (a permission request waits for a person), `blocked` (it ended after the rules, Tower or a person denied its last call), `verify_failed` (the job's check failed its last round). */
export type TurnPhase = "queued" | "running" | "waiting" | "succeeded" | "failed" | "interrupted" | "blocked" | "verify_failed" | "refused";

/** Where a turn is. */
export type TurnState = "queued" | "running" | "ended" | "refused";

/** A turn without its manifest (as the board lists them). */
export interface TurnSummary {
  /** Its cost in US dollars, when known. */
  cost_usd: number | null;
  created_at: number;
  ended_at: number | null;
  /** a one-shot turn's start and end trees (S29): {start, end, trusted: false}; null for turns the driver ran (their trees are `tree` events) */
  git_trees: Record<string, unknown> | null;
  id: string;
  index: number;
  /**
   * How it is doing or how it ended, in the words the CLI and the board show: `waiting` while
   * a permission request waits, then `succeeded`, `failed`, `interrupted`, `blocked` or
   * `verify_failed`.
   */
  phase: TurnPhase;
  /**
   * The phase in a line: why it failed or was refused, which call blocked it, how many
   * requests wait.
   */
  phase_detail: string | null;
  prompt: string;
  /** Why it ended or was refused, in words. */
  reason: string | null;
  run_id: string | null;
  session_id: string;
  started_at: number | null;
  state: TurnState;
  /** The harness's exit status, once ended. */
  status: number | null;
  usage: Usage;
  /** The job's check's state. */
  verify_state: string | null;
  /** Permission requests of its run that wait for an answer. */
  waiting: number;
}

/** Token totals. */
export interface Usage {
  cached_input_tokens: number;
  input_tokens: number;
  output_tokens: number;
}
