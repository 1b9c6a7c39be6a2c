//! The closed sets of words every part of hangar shares: which harness runs, which policy
//! answers its permission requests, the driver's ack status (defined with the ack, see
//! [`crate::ack::AckStatus`]), where a turn and a run are, a person's decision, and where and
//! how sandboxes run. Each reads and prints as the lowercase word the command line, the API, the
//! store and the wire use (`claude`, `ask`, `done`, `queued`, ...), and is defined here once:
//! the store, the sandboxes and the API's types (with the `schema` feature) use these.

/// A word that is not one of its set's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{value:?} is not a {what} (one of {choices})")]
pub struct UnknownWord {
    /// Which set (`harness`, `policy`, `ack status`).
    pub what: &'static str,
    /// What was given.
    pub value: String,
    /// The words of the set, comma-separated.
    pub choices: &'static str,
}

/// A closed set of words with `as_str`, `ALL`, `Display`, `FromStr` and serde as the words.
/// `schema "..."` gives the set's JSON Schema a description (the API's documents show it; the
/// variants' own doc comments stay out of the schema, which is a plain `enum` of the words).
macro_rules! words {
    ($(#[$m:meta])* $name:ident ($what:literal, $choices:literal) $(schema $desc:literal)? { $($(#[$vm:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, ::serde::Serialize, ::serde::Deserialize)]
        pub enum $name { $($(#[$vm])* #[serde(rename = $text)] $variant),+ }

        impl $name {
            /// Every word of the set, in the order they are listed.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The word.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        /// The set as a JSON Schema: a string, one of the words (for the API's documents).
        #[cfg(feature = "schema")]
        impl ::schemars::JsonSchema for $name {
            fn schema_name() -> ::std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }
            fn json_schema(_: &mut ::schemars::SchemaGenerator) -> ::schemars::Schema {
                #[allow(unused_mut)]
                let mut schema = ::schemars::json_schema!({"type": "string", "enum": [$($text),+]});
                $(schema.insert("description".into(), $desc.into());)?
                schema
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::words::UnknownWord;
            fn from_str(s: &str) -> Result<Self, $crate::words::UnknownWord> {
                match s {
                    $($text => Ok($name::$variant),)+
                    other => Err($crate::words::UnknownWord {
                        what: $what,
                        value: other.to_owned(),
                        choices: $choices,
                    }),
                }
            }
        }
    };
}
pub(crate) use words;

words!(
    /// The coding agent a session runs.
    Harness ("harness", "claude, codex") { Claude = "claude", Codex = "codex" }
);

words!(
    /// How a harness's permission requests are answered.
    Policy ("policy", "ask, auto, governed") {
        /// A person answers each request through `approve` / `deny` commands.
        Ask = "ask",
        /// No requests: the harness runs with permissions skipped (hangar's sandbox is the
        /// boundary).
        Auto = "auto",
        /// Each request goes to Tower's `/approvals`; Tower's answer is final.
        Governed = "governed",
    }
);

words!(
    /// Where a turn is.
    TurnState ("turn state", "queued, running, ended, refused") schema "Where a turn is." {
        Queued = "queued",
        Running = "running",
        Ended = "ended",
        Refused = "refused",
    }
);

words!(
    /// How a turn is doing or how it ended, in the words the CLI, the board and the API share
    /// (derived from the turn's state, its exit status, its check, its pending approvals and the
    /// last call the rules or a person denied; see `hangar_api::TurnSummary::phase`).
    TurnPhase ("turn phase", "queued, running, waiting, succeeded, failed, interrupted, blocked, verify_failed, refused")
        schema "How a turn is doing or how it ended: `waiting` (a permission request waits for a person), `blocked` (it ended after the rules, Tower or a person denied its last call), `verify_failed` (the job's check failed its last round)." {
        Queued = "queued",
        Running = "running",
        /// Running, with a permission request no one has answered yet.
        Waiting = "waiting",
        Succeeded = "succeeded",
        Failed = "failed",
        Interrupted = "interrupted",
        /// Ended after a denied call the agent did nothing more after.
        Blocked = "blocked",
        VerifyFailed = "verify_failed",
        Refused = "refused",
    }
);

words!(
    /// Whether a run's driver may still write to its log.
    RunState ("run state", "live, ended") schema "Whether a run's driver may still write to its log." {
        Live = "live",
        Ended = "ended",
    }
);

words!(
    /// A person's answer to a permission request. Read from JSON, `approve` is taken for
    /// `allow` (what the command is called); it is always written `allow`.
    Decision ("decision", "allow, deny")
        schema "A person's answer to a permission request (`approve` is taken for `allow`)." {
        #[serde(alias = "approve")]
        Allow = "allow",
        Deny = "deny",
    }
);

words!(
    /// Where sandboxes of an environment run.
    Provider ("provider", "local, docker, kubernetes, e2b")
        schema "Where sandboxes of an environment run." {
        /// bubblewrap on this machine (the embedded default).
        Local = "local",
        /// A container through the Docker Engine API.
        Docker = "docker",
        /// A pod per sandbox (GKE semantics: one uid per pod).
        Kubernetes = "kubernetes",
        /// An E2B sandbox through its HTTP API (one uid).
        E2b = "e2b",
    }
);

words!(
    /// How a sandbox may reach the network.
    NetworkMode ("network mode", "none, host, open, allowlist")
        schema "How a sandbox may reach the network." {
        /// Only loopback of its own.
        None = "none",
        /// The host's network namespace.
        Host = "host",
        /// A network of its own with a route out.
        Open = "open",
        /// Only loopback of its own and hangar's egress proxy, which lets through the
        /// environment's allowlisted hosts.
        Allowlist = "allowlist",
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_read_back_and_name_their_set_when_unknown() {
        for h in [Harness::Claude, Harness::Codex] {
            assert_eq!(h.as_str().parse::<Harness>(), Ok(h));
            assert_eq!(serde_json::to_string(&h).unwrap(), format!("\"{h}\""));
        }
        assert_eq!(
            serde_json::from_str::<Policy>("\"governed\"").unwrap(),
            Policy::Governed
        );
        let e = "Claude".parse::<Harness>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "\"Claude\" is not a harness (one of claude, codex)"
        );
        assert!("never".parse::<Policy>().is_err());
    }

    #[test]
    fn a_decision_reads_approve_as_allow_and_writes_allow() {
        assert_eq!(
            serde_json::from_str::<Decision>("\"approve\"").unwrap(),
            Decision::Allow
        );
        assert_eq!(
            serde_json::to_string(&Decision::Allow).unwrap(),
            "\"allow\""
        );
        // The store keeps only the written word.
        assert!("approve".parse::<Decision>().is_err());
    }

    #[test]
    fn every_word_is_listed_once_in_its_choices() {
        let choices = |all: &[&str]| all.join(", ");
        let names = |w: &[Provider]| w.iter().map(|p| p.as_str()).collect::<Vec<_>>();
        assert_eq!(
            choices(&names(Provider::ALL)),
            "bad".parse::<Provider>().unwrap_err().choices
        );
        for s in TurnState::ALL {
            assert_eq!(s.as_str().parse::<TurnState>(), Ok(*s));
        }
        for s in TurnPhase::ALL {
            assert_eq!(s.as_str().parse::<TurnPhase>(), Ok(*s));
        }
        let phases = TurnPhase::ALL
            .iter()
            .map(|p| p.as_str())
            .collect::<Vec<_>>();
        assert_eq!(
            choices(&phases),
            "ended".parse::<TurnPhase>().unwrap_err().choices
        );
        assert_eq!(
            "busy".parse::<RunState>().unwrap_err().to_string(),
            "\"busy\" is not a run state (one of live, ended)"
        );
    }
}
