//! Command file names: `<seq, 10+ digits>-<first 4 nonce bytes, hex>.cmd`, and their acks
//! `<command file name>.ack`. Written by the outbox, read back by the outbox (after a damaged
//! sequence file), by the remote mirror (which takes an ack from a pod only under a name made
//! here) and checked against the ack's own sequence number and nonce.

/// A command file name, taken apart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandName {
    /// The command's sequence number.
    pub seq: u64,
    /// The beginning of the command's nonce (hex), as the name carries it.
    pub nonce_prefix: String,
}

const CMD: &str = ".cmd";
const ACK: &str = ".ack";

/// The longest sequence number part (`u64::MAX` has 20 digits) and nonce part a name may have.
const MAX_SEQ_DIGITS: usize = 20;
const MAX_NONCE_HEX: usize = 64;

impl CommandName {
    /// The file name of command `seq` whose nonce begins with `nonce` (the outbox names it from
    /// the first 4 bytes).
    pub fn format(seq: u64, nonce: &[u8]) -> String {
        format!("{seq:010}-{}{CMD}", hex::encode(nonce))
    }

    /// Parses a command file name; `None` for anything the outbox does not make (so a name that
    /// parses can never leave the folder it is in).
    pub fn parse(name: &str) -> Option<CommandName> {
        let (seq, nonce) = name.strip_suffix(CMD)?.split_once('-')?;
        let ok = !seq.is_empty()
            && seq.len() <= MAX_SEQ_DIGITS
            && seq.bytes().all(|b| b.is_ascii_digit())
            && !nonce.is_empty()
            && nonce.len() <= MAX_NONCE_HEX
            && nonce.bytes().all(|b| b.is_ascii_hexdigit());
        if !ok {
            return None;
        }
        Some(CommandName {
            seq: seq.parse().ok()?,
            nonce_prefix: nonce.to_owned(),
        })
    }

    /// Parses an ack file name (`<command file name>.ack`): the command's name and its parts.
    pub fn parse_ack(name: &str) -> Option<(&str, CommandName)> {
        let cmd = name.strip_suffix(ACK)?;
        Some((cmd, CommandName::parse(cmd)?))
    }

    /// Whether `nonce` (a command's or an ack's, hex) is the one this name was made from.
    pub fn names_nonce(&self, nonce: &str) -> bool {
        nonce.len() > self.nonce_prefix.len() && nonce.starts_with(&self.nonce_prefix)
    }
}

/// The ack file name of a command file name.
pub fn ack_name(command_name: &str) -> String {
    format!("{command_name}{ACK}")
}

/// The sequence number in a command's or an ack's file name, if it is one the outbox makes.
pub fn seq_of(name: &str) -> Option<u64> {
    CommandName::parse(name)
        .or_else(|| CommandName::parse_ack(name).map(|(_, n)| n))
        .map(|n| n.seq)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back_as_made() {
        let name = CommandName::format(3, &[0xab, 0x12, 0xcd, 0x34]);
        assert_eq!(name, "0000000003-ab12cd34.cmd");
        let parsed = CommandName::parse(&name).unwrap();
        assert_eq!(parsed.seq, 3);
        assert!(parsed.names_nonce("ab12cd34ffff"));
        assert!(
            !parsed.names_nonce("ab12cd34"),
            "a prefix is not the whole nonce"
        );
        assert!(!parsed.names_nonce("ffab12cd34ff"));
        let ack = ack_name(&name);
        assert_eq!(CommandName::parse_ack(&ack), Some((name.as_str(), parsed)));
        assert_eq!(seq_of(&ack), Some(3));
        assert_eq!(seq_of(&name), Some(3));
    }

    /// Nothing that could name a path outside its folder, or that the outbox never makes, parses.
    #[test]
    fn only_the_outboxs_names_parse() {
        for bad in [
            "0001-ab/../../x.cmd",
            "0001-ab12.cmd/..",
            ".0001-ab12.cmd",
            "0001-zz.cmd",
            "x-ab12.cmd",
            "-ab12.cmd",
            "0001-.cmd",
            "0001-ab12",
            "0001-ab12.cmd.ack",
            "123456789012345678901-ab.cmd",
        ] {
            assert_eq!(CommandName::parse(bad), None, "{bad}");
        }
        for bad in [
            "0001-ab12.cmd",
            "0001-ab/../../x.cmd.ack",
            ".0001-ab12.cmd.ack",
        ] {
            assert_eq!(CommandName::parse_ack(bad), None, "{bad}");
        }
    }
}
