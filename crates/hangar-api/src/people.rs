//! People, their roles, and their API tokens: `/v1/people` and `/v1/tokens`. A token's secret is
//! in one answer only (the one that makes it); lists never carry a token or its hash.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What a person may do: an admin adds and removes people, sees and revokes anyone's tokens and
/// may act for another person; a member acts as themselves only; a viewer reads the team's work
/// (sessions, runs, transcripts, pending approvals) and acts on nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Admin,
    Member,
    /// Reads every session, run, transcript and pending approval of the team; acts on none.
    Viewer,
}

/// A person of the team.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Person {
    pub id: String,
    pub email: String,
    pub role: Role,
    /// When they were added (ms since the epoch).
    pub created_at: i64,
}

/// `GET /v1/people`: the people who are in, by email.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct People {
    pub people: Vec<Person>,
}

/// `POST /v1/people` (admins only).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AddPerson {
    #[schemars(regex(
        pattern = "^[^@\\s\\u0000-\\u001f\\u007f-\\u009f]+@[^@\\s\\u0000-\\u001f\\u007f-\\u009f]+$"
    ))]
    pub email: String,
    /// Default: member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
}

/// One person.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PersonOne {
    pub person: Person,
}

/// `DELETE /v1/people/{email}`: removed, and every token of theirs revoked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PersonRemoved {
    pub removed: String,
}

/// A token as lists show it: never the token, never its hash.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TokenInfo {
    pub id: String,
    pub person: String,
    /// What its person called it (empty when unnamed).
    pub name: String,
    /// Times are ms since the epoch.
    pub created_at: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<i64>,
    /// When it was last used, to the minute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_used_at: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<i64>,
}

/// `GET /v1/tokens`: your tokens (everyone's for an admin), oldest first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Tokens {
    pub tokens: Vec<TokenInfo>,
}

/// `POST /v1/tokens`: a token for yourself, or (admins only) for another person.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateToken {
    /// Whom it is for (default: the caller; another person only for an admin).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub person: Option<String>,
    /// What to call it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 100),
        regex(pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$")
    )]
    pub name: Option<String>,
    /// How long it lives: a number and `d`, `h` or `m` (`90d`, `12h`, `30m`), at most 365 days
    /// (default 90 days); tokens that never expire are refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = "^[1-9][0-9]{0,6}[dhm]$"))]
    pub expires: Option<String>,
}

/// The token just made: shown once, only its hash is kept.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TokenCreated {
    pub id: String,
    pub person: String,
    pub name: String,
    pub expires_at: i64,
    /// The bearer token; this is its only copy.
    pub token: String,
}

/// `DELETE /v1/tokens/{id}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TokenRevoked {
    pub revoked: String,
}

/// How long `expires` (`90d`, `12h`, `30m`) is, in milliseconds; a message saying what is
/// accepted otherwise (`never` included: every token expires).
pub fn lifetime_ms(expires: &str) -> Result<i64, String> {
    const MAX_DAYS: i64 = 365;
    let what = || {
        format!(
            "--expires {expires:?}: give a number and d, h or m (like 90d, 12h or 30m), at most {MAX_DAYS}d; every token expires"
        )
    };
    let (n, unit) = expires.split_at(expires.len().saturating_sub(1));
    let n: i64 = n.parse().map_err(|_| what())?;
    let unit_ms: i64 = match unit {
        "d" => 86_400_000,
        "h" => 3_600_000,
        "m" => 60_000,
        _ => return Err(what()),
    };
    let ms = n.checked_mul(unit_ms).ok_or_else(what)?;
    if n <= 0 || ms > MAX_DAYS * 86_400_000 {
        return Err(what());
    }
    Ok(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifetimes() {
        assert_eq!(lifetime_ms("90d"), Ok(90 * 86_400_000));
        assert_eq!(lifetime_ms("12h"), Ok(12 * 3_600_000));
        assert_eq!(lifetime_ms("30m"), Ok(30 * 60_000));
        assert_eq!(lifetime_ms("365d"), Ok(365 * 86_400_000));
        for bad in [
            "never",
            "366d",
            "0d",
            "-1d",
            "d",
            "",
            "10",
            "1w",
            "9999999999999999d",
        ] {
            assert!(lifetime_ms(bad).is_err(), "{bad}");
        }
    }
}
