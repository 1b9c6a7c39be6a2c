//! Process trees under /proc, to stop what an interrupted Codex turn left running.

use std::collections::HashMap;

/// Parent pid of every process, read from `/proc/<pid>/stat`.
fn parents() -> HashMap<u32, u32> {
    let mut map = HashMap::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return map;
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // The command name is in parentheses and may hold spaces: fields resume after the last ')'.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        if let Some(ppid) = rest.split_whitespace().nth(1).and_then(|s| s.parse().ok()) {
            map.insert(pid, ppid);
        }
    }
    map
}

/// SIGKILLs the descendants of `root`, sparing `root` and every process for which `spare` holds
/// (their own descendants are still looked at); how many were signalled. The Codex npm package
/// starts a Node.js wrapper that runs the native app-server, so the app-server is not `root`'s
/// direct child: both are spared by their command line.
pub fn kill_descendants(root: u32, spare: impl Fn(u32) -> bool) -> usize {
    let parents = parents();
    let children = |p: u32| {
        parents
            .iter()
            .filter(move |&(_, &pp)| pp == p)
            .map(|(&c, _)| c)
    };
    let mut walk: Vec<u32> = children(root).collect();
    let mut doomed = Vec::new();
    while let Some(p) = walk.pop() {
        if spare(p) {
            walk.extend(children(p));
            continue;
        }
        // p and everything below it.
        let mut tree = vec![p];
        let mut i = 0;
        while i < tree.len() {
            let q = tree[i];
            tree.extend(children(q));
            i += 1;
        }
        doomed.extend(tree);
    }
    // Stop them all first so none forks away while the others die.
    for &p in &doomed {
        signal(p, libc::SIGSTOP);
    }
    for &p in &doomed {
        signal(p, libc::SIGKILL);
    }
    doomed.len()
}

/// Whether the process's command line has `word` among its arguments.
pub fn has_arg(pid: u32, word: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|c| c.split(|&b| b == 0).any(|a| a == word.as_bytes()))
}

fn signal(pid: u32, sig: i32) {
    if let Ok(p) = i32::try_from(pid) {
        // SAFETY: kill(2) takes integers; a stale pid is at worst ESRCH.
        unsafe {
            libc::kill(p, sig);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn kills_the_descendants_and_spares_the_root() {
        let mut sh = Command::new("sh")
            .args(["-c", "sleep 30 & sleep 30 & wait; exit 0"])
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        let killed = kill_descendants(sh.id(), |_| false);
        assert_eq!(killed, 2, "the two sleeps");
        let st = sh.wait().unwrap();
        assert!(st.success(), "the shell itself lives on and exits normally");
    }

    #[test]
    fn spared_processes_live_and_their_children_do_not() {
        // outer sh -> inner sh (spared: it has the argument "keep-me") -> sleep
        let mut sh = Command::new("sh")
            .args(["-c", "sh -c 'sleep 30; exit 0' keep-me & wait; exit 0"])
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        let killed = kill_descendants(sh.id(), |p| has_arg(p, "keep-me"));
        assert_eq!(killed, 1, "only the sleep");
        assert!(sh.wait().unwrap().success());
    }
}
