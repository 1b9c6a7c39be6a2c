//! The shortest prefix of an id that no other id starts with (issue 21's short ids): what the
//! CLI's lists and hints print and `GET /v1/ids/{prefix}` answers. One rule for both, so a
//! prefix the CLI prints is one the server takes back.

/// The shortest prefix of `id` that none of `others` starts with, at least `least` bytes (and
/// at most the whole id). `others` may hold `id` itself: it is skipped.
pub fn shortest_unique<'a>(
    id: &'a str,
    others: impl IntoIterator<Item = &'a str>,
    least: usize,
) -> &'a str {
    let shared = others
        .into_iter()
        .filter(|o| *o != id)
        .map(|o| {
            o.bytes()
                .zip(id.bytes())
                .take_while(|(a, b)| a == b)
                .count()
        })
        .max()
        .unwrap_or(0);
    let cut = (shared + 1).max(least).min(id.len());
    id.get(..cut).unwrap_or(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_is_cut_where_the_ids_part() {
        assert_eq!(
            shortest_unique("run-3fa9c2d1", ["run-3fa9c2d2"], 10),
            "run-3fa9c2d1"
        );
        assert_eq!(
            shortest_unique("run-3fa9c2d1", ["run-77"], 10),
            "run-3fa9c2"
        );
        assert_eq!(shortest_unique("run-3f", ["run-3f"], 10), "run-3f");
        assert_eq!(shortest_unique("abc", [], 8), "abc");
    }
}
