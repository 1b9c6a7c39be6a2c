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

/// Whether `pid` is `ancestor` or one of its descendants.
pub fn descends_from(pid: u32, ancestor: u32) -> bool {
    let parents = parents();
    let mut p = pid;
    for _ in 0..4096 {
        if p == ancestor {
            return true;
        }
        match parents.get(&p) {
            Some(&pp) if pp != 0 && pp != p => p = pp,
            _ => return false,
        }
    }
    false
}

/// SIGKILLs `pid` and all its descendants; how many were signalled.
pub fn kill_tree(pid: u32) -> usize {
    let parents = parents();
    let mut tree = vec![pid];
    let mut i = 0;
    while i < tree.len() {
        let p = tree[i];
        tree.extend(parents.iter().filter(|&(_, &pp)| pp == p).map(|(&c, _)| c));
        i += 1;
    }
    // Stop them all first so none forks away while the others die.
    for &p in &tree {
        signal(p, libc::SIGSTOP);
    }
    for &p in &tree {
        signal(p, libc::SIGKILL);
    }
    tree.len()
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
    fn kills_a_tree_of_descendants() {
        let mut sh = Command::new("sh")
            .args(["-c", "sleep 30 & sleep 30 & wait"])
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        let me = std::process::id();
        assert!(descends_from(sh.id(), me));
        assert!(!descends_from(me, sh.id()));
        let killed = kill_tree(sh.id());
        assert_eq!(killed, 3, "the shell and its two sleeps");
        let st = sh.wait().unwrap();
        assert!(!st.success());
    }
}
