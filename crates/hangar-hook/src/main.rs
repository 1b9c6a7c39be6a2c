//! `hangar-tower-hook`: see the library's documentation. Exit 0 with nothing printed lets the
//! call go on to hangar's own checks; exit 2 with a reason on stderr blocks it.

use std::io::Read;

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut input = Vec::new();
    // One byte over the limit is enough to refuse it.
    let read = std::io::stdin()
        .lock()
        .take(16 * 1024 * 1024 + 1)
        .read_to_end(&mut input);
    let outcome = match read {
        Ok(_) => hangar_hook::run(&argv, &input),
        Err(e) => hangar_hook::Outcome {
            code: hangar_hook::BLOCK,
            message: format!("hangar's Tower hook blocked this call: cannot read its input: {e}"),
        },
    };
    if !outcome.message.is_empty() {
        #[expect(clippy::print_stderr, reason = "Claude Code shows the hook's stderr")]
        {
            eprintln!("{}", outcome.message);
        }
    }
    std::process::exit(outcome.code);
}
