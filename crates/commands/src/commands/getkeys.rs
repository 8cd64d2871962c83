//! Where a command's keys are: the table's first/last/step, and the commands whose keys move
//! (a `numkeys` argument, XREAD's `STREAMS`, SORT's `STORE`, a subcommand's key), as Redis's
//! `getKeysFromCommand`. `COMMAND GETKEYS` answers from it, and a cluster routes by it (every key
//! of a command must hash to one slot), so what a client is told is exactly what is checked.
//!
//! Invariant: every position returned is inside `args` (a `numkeys` larger than the arguments
//! present is an error, never an out-of-range key), and nothing is sized by a client's number
//! beyond the argument count.

use bytes::Bytes;

use super::{lower, table, CommandError, CommandResult, Ctx};

/// Why a command's keys cannot be found (Redis's `COMMAND GETKEYS` errors).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeysError {
    /// No such command.
    UnknownCommand,
    /// The argument count does not fit the command's arity.
    Arity,
    /// The arguments do not say where the keys are (a bad `numkeys`, no `STREAMS`).
    InvalidArguments,
}

impl KeysError {
    fn error(self) -> CommandError {
        match self {
            KeysError::UnknownCommand => CommandError::err("Invalid command specified"),
            KeysError::Arity => {
                CommandError::err("Invalid number of arguments specified for command")
            }
            KeysError::InvalidArguments => {
                CommandError::err("Invalid arguments specified for command")
            }
        }
    }
}

/// The positions in `args` (name first) of the command's keys, in order; empty for a command
/// with none.
pub fn key_positions(args: &[Bytes]) -> Result<Vec<usize>, KeysError> {
    let name = lower(args.first().ok_or(KeysError::UnknownCommand)?);
    let spec = table::find(&name).ok_or(KeysError::UnknownCommand)?;
    if !table::arity_ok(spec, args.len()) {
        return Err(KeysError::Arity);
    }
    let count = args.len();
    // `numkeys` at `at`, its keys right after it.
    let numkeys = |at: usize| -> Result<Vec<usize>, KeysError> {
        let n = std::str::from_utf8(&args[at])
            .ok()
            .and_then(|text| text.parse::<i64>().ok())
            .ok_or(KeysError::InvalidArguments)?;
        if n < 0 || n as usize > count - at - 1 {
            return Err(KeysError::InvalidArguments);
        }
        Ok((at + 1..at + 1 + n as usize).collect())
    };
    match name.as_str() {
        "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "fcall" | "fcall_ro" => numkeys(2),
        "sintercard" | "zunion" | "zinter" | "zdiff" | "zintercard" | "lmpop" | "zmpop" => {
            numkeys(1)
        }
        "blmpop" | "bzmpop" => numkeys(2),
        "zunionstore" | "zinterstore" | "zdiffstore" => {
            let mut keys = vec![1];
            keys.extend(numkeys(2)?);
            Ok(keys)
        }
        "xread" | "xreadgroup" => {
            let streams = args
                .iter()
                .position(|a| a.eq_ignore_ascii_case(b"streams"))
                .ok_or(KeysError::InvalidArguments)?;
            let rest = count - streams - 1;
            if rest == 0 || !rest.is_multiple_of(2) {
                return Err(KeysError::InvalidArguments);
            }
            Ok((streams + 1..streams + 1 + rest / 2).collect())
        }
        "sort" | "sort_ro" => {
            let mut keys = vec![1];
            // SORT key ... STORE destination: the destination is a key too.
            let mut i = 2;
            while i < count {
                if args[i].eq_ignore_ascii_case(b"store") && i + 1 < count && name == "sort" {
                    keys.push(i + 1);
                    i += 1;
                } else if args[i].eq_ignore_ascii_case(b"limit") {
                    i += 2;
                } else if args[i].eq_ignore_ascii_case(b"by")
                    || args[i].eq_ignore_ascii_case(b"get")
                {
                    i += 1;
                }
                i += 1;
            }
            Ok(keys)
        }
        "object" | "memory" => {
            let sub = lower(&args[1]);
            let keyed = match name.as_str() {
                "object" => matches!(sub.as_str(), "encoding" | "freq" | "idletime" | "refcount"),
                _ => sub == "usage",
            };
            // A keyed subcommand's own arity (OBJECT ENCODING's is 3, MEMORY USAGE's -3).
            let arity_ok = match name.as_str() {
                "object" => count == 3,
                _ => count >= 3,
            };
            match (keyed, arity_ok) {
                (false, _) => Ok(Vec::new()),
                (true, true) => Ok(vec![2]),
                (true, false) => Err(KeysError::Arity),
            }
        }
        "xgroup" | "xinfo" => {
            let sub = lower(&args[1]);
            Ok(if sub != "help" && count >= 3 {
                vec![2]
            } else {
                Vec::new()
            })
        }
        _ => Ok(table_positions(spec, count)),
    }
}

/// The table's first/last/step positions for `count` arguments.
fn table_positions(spec: &table::Spec, count: usize) -> Vec<usize> {
    if spec.first_key == 0 {
        return Vec::new();
    }
    let count = count as i64;
    let last = if spec.last_key < 0 {
        count + spec.last_key
    } else {
        spec.last_key.min(count - 1)
    };
    if spec.first_key > last {
        return Vec::new();
    }
    (spec.first_key..=last)
        .step_by(spec.step.max(1) as usize)
        .map(|i| i as usize)
        .collect()
}

/// The keys of `args`, in order (see [`key_positions`]).
pub fn keys(args: &[Bytes]) -> Result<Vec<&[u8]>, KeysError> {
    Ok(key_positions(args)?
        .into_iter()
        .map(|i| &args[i][..])
        .collect())
}

/// Whether `name` is a command that may name no keys at all (EVAL, FCALL and their forms).
fn no_mandatory_keys(name: &[u8]) -> bool {
    matches!(
        lower(name).as_str(),
        "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "fcall" | "fcall_ro"
    )
}

/// `COMMAND GETKEYS command arg…`.
pub(super) fn command_getkeys(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    // Redis 7.0 declares GETKEYS's arity as -4: a command name with no argument is GETKEYS's
    // own arity error, whatever the command.
    if args.len() < 4 {
        return Err(CommandError::arity("command|getkeys"));
    }
    let keys = match keys(&args[2..]) {
        // Scripts and functions may have no keys (Redis's `no-mandatory-keys` flag): a numkeys
        // that names none, or none Redis can read, is an empty answer, not an error.
        Err(KeysError::InvalidArguments) if no_mandatory_keys(&args[2]) => Vec::new(),
        Ok(keys) if keys.is_empty() && !no_mandatory_keys(&args[2]) => {
            return Err(CommandError::err("The command has no key arguments"));
        }
        found => found.map_err(KeysError::error)?,
    };
    ctx.w.array(keys.len());
    for key in keys {
        ctx.w.bulk(key);
    }
    Ok(())
}
