//! The hook's (and the governed driver's) reading of Tower's answer, once its bytes are in:
//! the HTTP head (status, content-length, chunked), the body, the decision of a call and the
//! state of a polled approval. Whatever Tower (or whoever answers in its place) sends, it
//! must be read or be a fault (the callers fail closed on a fault), never a panic, and an
//! allow must be an allow Tower said.
//!
//! The first byte picks the form: the input as the whole raw answer, or as the JSON body of a
//! well-formed `200` answer (to go deeper into the JSON).
#![no_main]

use hangar_hook::client::Decision;
use hangar_hook::client::fuzzing::{approval_state, complete, decision, response, valid_id};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let raw = if mode & 1 == 0 {
        rest.to_vec()
    } else {
        let mut r = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            rest.len()
        )
        .into_bytes();
        r.extend_from_slice(rest);
        r
    };
    let _ = complete(&raw);
    let parsed = response(&raw);
    match decision(&raw) {
        Ok(d) => {
            let (status, body) = parsed
                .clone()
                .expect("a decision came from a readable answer");
            assert_eq!(status, 200, "a decision from a non-200 answer");
            let v: Value = serde_json::from_slice(&body).expect("a decision came from JSON");
            let said = v.get("decision").and_then(Value::as_str);
            match d {
                Decision::Allow { .. } => assert_eq!(said, Some("allow")),
                Decision::Deny { .. } => assert_eq!(said, Some("deny")),
                Decision::Wait { id, .. } => {
                    assert_eq!(said, Some("wait"));
                    assert!(valid_id(&id), "wait on an id that is not a token: {id:?}");
                    assert!(!id.contains('/') && id != "." && id != "..");
                }
            }
        }
        Err(f) => assert!(!f.0.is_empty(), "a fault without a reason"),
    }
    match approval_state(&raw) {
        Ok(st) => {
            let (status, _) = parsed.expect("a state came from a readable answer");
            assert_eq!(status, 200);
            assert!(["pending", "allowed", "denied", "expired"].contains(&st.state.as_str()));
        }
        Err(f) => assert!(!f.0.is_empty()),
    }
});
