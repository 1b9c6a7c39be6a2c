//! The closed sets of words every part of hangar shares: which harness runs, which policy
//! answers its permission requests, and the driver's ack status (defined with the ack, see
//! [`crate::ack::AckStatus`]). Each reads and prints as the lowercase word the command line,
//! the API, the store and the wire use (`claude`, `ask`, `done`, ...).

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

/// A closed set of words with `as_str`, `Display`, `FromStr` and serde as the words.
macro_rules! words {
    ($(#[$m:meta])* $name:ident ($what:literal, $choices:literal) { $($(#[$vm:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, ::serde::Serialize, ::serde::Deserialize)]
        pub enum $name { $($(#[$vm])* #[serde(rename = $text)] $variant),+ }

        impl $name {
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
                ::schemars::json_schema!({"type": "string", "enum": [$($text),+]})
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
}
