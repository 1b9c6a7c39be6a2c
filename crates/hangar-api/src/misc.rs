//! Health, keys, errors, credentials, the audit log and who a token is.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::vocab::ErrorCode;

/// `GET /v1/health`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Health {
    pub ok: bool,
    pub version: String,
}

/// `GET /v1/ready`: the server can serve (its database answers); a 503 error otherwise.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Ready {
    pub ready: bool,
    /// The schema version the database is at.
    pub schema: i64,
    pub version: String,
}

/// One public key (a JWK).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Jwk {
    pub kty: String,
    pub kid: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crv: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alg: Option<String>,
    #[serde(default, rename = "use", skip_serializing_if = "Option::is_none")]
    pub use_: Option<String>,
}

/// `GET /.well-known/jwks.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Jwks {
    pub keys: Vec<Jwk>,
}

/// What went wrong: a kind and a message a person can act on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorDetail {
    pub code: ErrorCode,
    pub message: String,
}

/// Every error answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "Error")]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// `GET /v1/credentials`: the names, never the values.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CredentialNames {
    pub credentials: Vec<String>,
}

/// A credential's value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CredentialValue {
    pub value: String,
}

/// The credential set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CredentialSet {
    pub name: String,
}

/// The credential removed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CredentialRemoved {
    pub removed: String,
}

/// One record of the hash-chained audit log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AuditRecord {
    pub seq: i64,
    pub at: i64,
    pub actor: String,
    pub action: String,
    /// A JSON object, as text (what the hash covers).
    pub detail: String,
    pub hash: String,
}

/// `GET /v1/audit`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AuditRecords {
    pub records: Vec<AuditRecord>,
}

/// `GET /v1/turns/{id}/audit`: the records about one turn.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TurnAudit {
    pub turn: String,
    pub records: Vec<AuditRecord>,
}

/// `GET /v1/audit/verify`: whether the chain holds (`records` checked), else the `error`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AuditVerify {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub records: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `GET /v1/ids/{prefix}`: the one id a prefix names, among those the person may read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct IdInfo {
    /// `run`, `session`, `turn` or `sandbox`.
    pub kind: String,
    /// The whole id.
    pub id: String,
    /// Its shortest unique prefix (at least `KIND-` and six hex digits), what hints print.
    pub short: String,
}

/// `GET /v1/me`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Me {
    pub person: String,
    /// What they may do.
    pub role: crate::Role,
    /// The id of the token this request carried (what signing out revokes).
    pub token_id: String,
}
