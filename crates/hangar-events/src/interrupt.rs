//! An interrupt's report in words (issue 21), the same wherever it is shown: `hangar run`,
//! `hangar log`, the turn's `phase_detail` in the API and on the board.

/// The words for a `hangar.interrupted` line. `kind_of(seq)` names a message's kind (`prompt`,
/// `steer`) when the caller knows it.
pub fn describe(
    seq: u64,
    person: Option<&str>,
    answering: &[u64],
    queued: &[u64],
    approvals: usize,
    kind_of: impl Fn(u64) -> Option<String>,
) -> String {
    let by = match (seq, person) {
        (0, _) => "interrupted from the terminal (Ctrl-C)".to_owned(),
        (_, Some(p)) => format!("interrupted by {p}"),
        (_, None) => "interrupted".to_owned(),
    };
    let name = |s: &u64| named(*s, kind_of(*s).as_deref());
    let mut parts = Vec::new();
    if !answering.is_empty() {
        let names: Vec<String> = answering.iter().map(name).collect();
        parts.push(format!("stopped the answer to {}", names.join(" and ")));
    }
    if approvals > 0 {
        parts.push(match approvals {
            1 => "withdrew the waiting approval".to_owned(),
            n => format!("withdrew {n} waiting approvals"),
        });
    }
    if parts.is_empty() {
        parts.push("the model was not answering".to_owned());
    }
    if !queued.is_empty() {
        let names: Vec<String> = queued.iter().map(name).collect();
        parts.push(format!(
            "{} not yet begun, still {}",
            names.join(" and "),
            if queued.len() == 1 { "runs" } else { "run" }
        ));
    }
    format!("{by}: {}", parts.join("; "))
}

/// A command as a person knows it: its kind and number (`steer #2`; `message #2` when the kind
/// is not known).
pub fn named(seq: u64, kind: Option<&str>) -> String {
    format!("{} #{seq}", kind.unwrap_or("message"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(s: u64) -> Option<String> {
        Some(if s == 1 { "prompt" } else { "steer" }.to_owned())
    }

    #[test]
    fn says_what_it_stopped_and_what_still_runs() {
        assert_eq!(
            describe(3, Some("alice@example.com"), &[1], &[2], 0, kinds),
            "interrupted by alice@example.com: stopped the answer to prompt #1; steer #2 not yet \
             begun, still runs"
        );
        assert_eq!(
            describe(0, None, &[1, 2], &[], 2, kinds),
            "interrupted from the terminal (Ctrl-C): stopped the answer to prompt #1 and steer \
             #2; withdrew 2 waiting approvals"
        );
        assert_eq!(
            describe(4, None, &[], &[], 0, |_| None),
            "interrupted: the model was not answering"
        );
        assert_eq!(
            describe(4, None, &[5], &[6, 7], 1, |_| None),
            "interrupted: stopped the answer to message #5; withdrew the waiting approval; \
             message #6 and message #7 not yet begun, still run"
        );
    }
}
