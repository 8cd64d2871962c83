//! A worker's view of the cluster as Redis Cluster clients see it: hash slot ownership
//! (`-MOVED`, `-CROSSSLOT`), the `CLUSTER …` topology queries and the `COMMAND` table that
//! cluster-aware clients (redis-py's `RedisCluster`, go-redis's `ClusterClient`, `redis-cli -c`)
//! read at start-up to route keys.
//!
//! Ownership comes from the metadata store's `dpr_ownership` table (libDPR,
//! `prefixkv_dpr::metadata::ownership`), partitions being Redis Cluster's 16384 hash slots
//! ([`prefixkv_dprnet::slots`]); the launcher writes it before it starts the workers, each
//! worker reads it at start and again while it runs (`worker/slots.rs`), and a slot migration
//! (`crate::migrate`) replaces it. With no table published, the worker owns every slot (a
//! one-node cluster).
//!
//! Invariants:
//! - A command runs on a worker only if every key it names hashes to one slot (else
//!   `-CROSSSLOT`, as Redis Cluster) and this worker owns that slot (else `-MOVED <slot>
//!   <host>:<port>` naming the owner, or `-CLUSTERDOWN` if no one owns it), and the slot is not
//!   *frozen* by a migration (else `-TRYAGAIN`, which cluster clients retry). The check is made
//!   after the arity check, as Redis does: a malformed command gets its arity error instead.
//! - Key positions are the command layer's ([`keys_of`]: the table's plus the movable keys),
//!   which also answers `COMMAND` and `COMMAND GETKEYS`, so what clients route by is exactly
//!   what the worker checks.
//! - Replies are RESP2 (plain RESP connections on a worker speak RESP2 only).

use bytes::Bytes;
use prefixkv_dpr::metadata::{MetadataError, MetadataStore, PartitionRange};
use prefixkv_dpr::{WorkerId, WorldLine};
use prefixkv_dprnet::slots::{key_slot, SLOT_COUNT};
use prefixkv_resp::{Encoder, Protocol};

/// The keys of a command, or None if it names none or they cannot be found (a wrong arity, a
/// bad `numkeys`: then it is not checked, and it gets its own error where it runs). The command
/// layer's key positions (`COMMAND GETKEYS`), so what clients are told is what is checked.
pub fn keys_of(args: &[Bytes]) -> Option<Vec<&[u8]>> {
    crate::worker::shard::keys_of(args)
}

/// The 40-hex-digit node id Redis Cluster clients see for a worker.
pub fn node_id(worker: WorkerId) -> String {
    format!("{worker:040x}")
}

/// One worker's view of slot ownership.
#[derive(Clone, Debug)]
pub struct Topology {
    me: WorkerId,
    /// Slot ranges, sorted and disjoint (libDPR's ownership invariants).
    ranges: Vec<PartitionRange>,
    /// Inclusive slot ranges this worker owns but has renounced for a migration: their
    /// commands get `-TRYAGAIN` until the migration publishes the new owner or is abandoned.
    frozen: Vec<(u16, u16)>,
    /// Whether a table was published (else this worker owns every slot on its own).
    published: bool,
}

impl Topology {
    /// Reads the ownership table; with none published, this worker owns every slot at
    /// `my_address`. Refuses a table naming slots beyond 16383.
    pub fn load(
        store: &dyn MetadataStore,
        me: WorkerId,
        my_address: &str,
    ) -> Result<Self, MetadataError> {
        Self::from_ranges(store.ownership()?, me, my_address)
    }

    /// As [`Topology::load`], from ranges already read.
    pub fn from_ranges(
        ranges: Vec<PartitionRange>,
        me: WorkerId,
        my_address: &str,
    ) -> Result<Self, MetadataError> {
        if let Some(range) = ranges.iter().find(|r| r.last >= u64::from(SLOT_COUNT)) {
            return Err(MetadataError::Invalid(format!(
                "ownership range {}..={} goes past the last hash slot {}",
                range.first,
                range.last,
                SLOT_COUNT - 1
            )));
        }
        let published = !ranges.is_empty();
        let ranges = if ranges.is_empty() {
            vec![PartitionRange {
                first: 0,
                last: u64::from(SLOT_COUNT) - 1,
                worker: me,
                address: my_address.to_string(),
            }]
        } else {
            ranges
        };
        Ok(Self {
            me,
            ranges,
            frozen: Vec::new(),
            published,
        })
    }

    /// This view with `frozen` as the frozen slot ranges, keeping only the slots it says this
    /// worker owns (a slot the table gave away needs no freezing: it is `-MOVED`).
    pub fn with_frozen(&self, frozen: &[(u16, u16)]) -> Self {
        let frozen = frozen
            .iter()
            .copied()
            .filter(|&(first, last)| first <= last && self.owns_all(first, last))
            .collect();
        Self {
            me: self.me,
            ranges: self.ranges.clone(),
            frozen,
            published: self.published,
        }
    }

    /// The frozen slot ranges.
    pub fn frozen(&self) -> &[(u16, u16)] {
        &self.frozen
    }

    /// Whether this worker owns every slot of `first..=last`.
    pub fn owns_all(&self, first: u16, last: u16) -> bool {
        (first..=last).all(|slot| self.owner(slot).is_some_and(|r| r.worker == self.me))
    }

    /// Whether this worker owns any slot of `first..=last`.
    pub fn owns_any(&self, first: u16, last: u16) -> bool {
        (first..=last).any(|slot| self.owner(slot).is_some_and(|r| r.worker == self.me))
    }

    /// Whether an ownership table was published (with none, this worker owns every slot).
    pub fn published(&self) -> bool {
        self.published
    }

    /// The owner of `slot`.
    pub fn owner(&self, slot: u16) -> Option<&PartitionRange> {
        prefixkv_dpr::metadata::ownership::owner_of(&self.ranges, u64::from(slot))
    }

    /// Why `args` may not run here (`-CROSSSLOT`, `-MOVED`, `-CLUSTERDOWN`), as a RESP error
    /// reply; None if it may.
    pub fn redirect(&self, args: &[Bytes]) -> Option<Vec<u8>> {
        let keys = keys_of(args)?;
        let slot = key_slot(keys.first()?);
        if keys.iter().any(|key| key_slot(key) != slot) {
            return Some(b"-CROSSSLOT Keys in request don't hash to the same slot\r\n".to_vec());
        }
        match self.owner(slot) {
            Some(owner) if owner.worker == self.me => {
                if self
                    .frozen
                    .iter()
                    .any(|&(first, last)| (first..=last).contains(&slot))
                {
                    Some(
                        format!("-TRYAGAIN Hash slot {slot} is being migrated; retry later\r\n")
                            .into_bytes(),
                    )
                } else {
                    None
                }
            }
            Some(owner) => Some(format!("-MOVED {slot} {}\r\n", owner.address).into_bytes()),
            None => Some(format!("-CLUSTERDOWN Hash slot {slot} is not served\r\n").into_bytes()),
        }
    }

    /// The reply to a command this layer answers (`CLUSTER …`, `COMMAND …`, `READONLY`,
    /// `READWRITE`, `ASKING`); None for any other command. `world_line` is reported as the
    /// cluster's epoch (it grows with every failure, as Redis's epoch grows with every failover);
    /// it is asked for only when a reply reports it.
    pub fn answer(
        &self,
        args: &[Bytes],
        world_line: impl FnOnce() -> WorldLine,
    ) -> Option<Vec<u8>> {
        // Most commands are none of these: decide without allocating.
        const ANSWERED: [&[u8]; 4] = [b"READONLY", b"READWRITE", b"ASKING", b"CLUSTER"];
        if !ANSWERED
            .iter()
            .any(|n| args.first().is_some_and(|a| a.eq_ignore_ascii_case(n)))
        {
            return None;
        }
        let name = args[0].to_ascii_uppercase();
        let mut out = bytes::BytesMut::new();
        let encoder = Encoder::new(Protocol::Resp2);
        match &name[..] {
            b"READONLY" | b"READWRITE" | b"ASKING" if args.len() == 1 => {
                // Every worker is a primary: reading from "replicas" reads the primary.
                encoder.simple_string(&mut out, b"OK");
            }
            b"CLUSTER" if args.len() >= 2 => {
                let sub = args[1].to_ascii_uppercase();
                let epoch = if sub == b"INFO" || sub == b"NODES" {
                    world_line()
                } else {
                    0
                };
                self.cluster(&encoder, &mut out, args, epoch)
            }
            _ => return None,
        }
        Some(out.to_vec())
    }

    fn cluster(
        &self,
        encoder: &Encoder,
        out: &mut bytes::BytesMut,
        args: &[Bytes],
        world_line: WorldLine,
    ) {
        let sub = args[1].to_ascii_uppercase();
        match (&sub[..], args.len()) {
            (b"KEYSLOT", 3) => encoder.integer(out, i64::from(key_slot(&args[2]))),
            (b"MYID", 2) => encoder.bulk_string(out, node_id(self.me).as_bytes()),
            (b"SLOTS", 2) => {
                encoder.array_header(out, self.ranges.len());
                for range in &self.ranges {
                    let (host, port) = split_address(&range.address);
                    encoder.array_header(out, 3);
                    encoder.integer(out, range.first as i64);
                    encoder.integer(out, range.last as i64);
                    encoder.array_header(out, 3);
                    encoder.bulk_string(out, host.as_bytes());
                    encoder.integer(out, port);
                    encoder.bulk_string(out, node_id(range.worker).as_bytes());
                }
            }
            (b"SHARDS", 2) => {
                let workers = self.workers();
                encoder.array_header(out, workers.len());
                for (worker, address) in workers {
                    let (host, port) = split_address(address);
                    let owned: Vec<_> = self.ranges.iter().filter(|r| r.worker == worker).collect();
                    encoder.array_header(out, 4);
                    encoder.bulk_string(out, b"slots");
                    encoder.array_header(out, 2 * owned.len());
                    for range in owned {
                        encoder.integer(out, range.first as i64);
                        encoder.integer(out, range.last as i64);
                    }
                    encoder.bulk_string(out, b"nodes");
                    encoder.array_header(out, 1);
                    encoder.array_header(out, 14);
                    for (field, value) in [
                        ("id", node_id(worker)),
                        ("port", String::new()),
                        ("ip", host.to_string()),
                        ("endpoint", host.to_string()),
                        ("role", "master".into()),
                        ("replication-offset", String::new()),
                        ("health", "online".into()),
                    ] {
                        encoder.bulk_string(out, field.as_bytes());
                        match field {
                            "port" => encoder.integer(out, port),
                            "replication-offset" => encoder.integer(out, 0),
                            _ => encoder.bulk_string(out, value.as_bytes()),
                        }
                    }
                }
            }
            (b"NODES", 2) => {
                let mut text = String::new();
                for (worker, address) in self.workers() {
                    let (host, port) = split_address(address);
                    let flags = if worker == self.me {
                        "myself,master"
                    } else {
                        "master"
                    };
                    text.push_str(&format!(
                        "{} {host}:{port}@{} {flags} - 0 0 {world_line} connected",
                        node_id(worker),
                        port + 10000
                    ));
                    for range in self.ranges.iter().filter(|r| r.worker == worker) {
                        text.push_str(&format!(" {}-{}", range.first, range.last));
                    }
                    text.push('\n');
                }
                encoder.bulk_string(out, text.as_bytes());
            }
            (b"INFO", 2) => {
                let assigned: u64 = self.ranges.iter().map(|r| r.last - r.first + 1).sum();
                let state = if assigned == u64::from(SLOT_COUNT) {
                    "ok"
                } else {
                    "fail"
                };
                let nodes = self.workers().len();
                let text = format!(
                    "cluster_state:{state}\r\ncluster_slots_assigned:{assigned}\r\n\
                     cluster_slots_ok:{assigned}\r\ncluster_slots_pfail:0\r\n\
                     cluster_slots_fail:0\r\ncluster_known_nodes:{nodes}\r\n\
                     cluster_size:{nodes}\r\ncluster_current_epoch:{world_line}\r\n\
                     cluster_my_epoch:{world_line}\r\ncluster_stats_messages_sent:0\r\n\
                     cluster_stats_messages_received:0\r\n"
                );
                encoder.bulk_string(out, text.as_bytes());
            }
            _ => {
                let text = format!(
                    "ERR unknown subcommand or wrong number of arguments for 'CLUSTER {}' (a \
                     prefixkv worker answers CLUSTER SLOTS, SHARDS, NODES, INFO, KEYSLOT, MYID)",
                    String::from_utf8_lossy(&args[1])
                );
                encoder.error(out, text.as_bytes());
            }
        }
    }

    /// Each worker once, in id order, with its address.
    fn workers(&self) -> Vec<(WorkerId, &str)> {
        let mut workers: Vec<_> = self
            .ranges
            .iter()
            .map(|r| (r.worker, r.address.as_str()))
            .collect();
        workers.sort_unstable();
        workers.dedup_by_key(|(worker, _)| *worker);
        workers
    }
}

/// `host:port` (the port after the last colon, so bracketed IPv6 hosts work) → (host, port).
fn split_address(address: &str) -> (&str, i64) {
    match address.rsplit_once(':') {
        Some((host, port)) => (
            host.trim_start_matches('[').trim_end_matches(']'),
            port.parse().unwrap_or(0),
        ),
        None => (address, 0),
    }
}

/// Three workers owning an even split, at 127.0.0.1:7000–7002, as worker `me` sees it (tests).
#[cfg(test)]
pub(crate) fn three_workers(me: WorkerId) -> Topology {
    let ranges = prefixkv_dprnet::slots::even_split(3)
        .into_iter()
        .enumerate()
        .map(|(worker, (first, last))| PartitionRange {
            first: u64::from(first),
            last: u64::from(last),
            worker: worker as u64,
            address: format!("127.0.0.1:{}", 7000 + worker),
        })
        .collect();
    Topology::from_ranges(ranges, me, "unused").unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Vec<Bytes> {
        words
            .iter()
            .map(|w| Bytes::copy_from_slice(w.as_bytes()))
            .collect()
    }

    fn text(reply: Option<Vec<u8>>) -> String {
        String::from_utf8(reply.expect("a reply")).unwrap()
    }

    #[test]
    fn keys_follow_the_command_table() {
        assert_eq!(keys_of(&args(&["GET", "k"])), Some(vec![&b"k"[..]]));
        assert_eq!(
            keys_of(&args(&["mset", "a", "1", "b", "2"])),
            Some(vec![&b"a"[..], &b"b"[..]])
        );
        assert_eq!(
            keys_of(&args(&["DEL", "a", "b", "c"])),
            Some(vec![&b"a"[..], &b"b"[..], &b"c"[..]])
        );
        assert_eq!(
            keys_of(&args(&["GET"])),
            None,
            "arity errors are not checked"
        );
        assert_eq!(
            keys_of(&args(&["EVAL", "return 1", "2", "x", "y", "z"])),
            Some(vec![&b"x"[..], &b"y"[..]])
        );
        assert_eq!(keys_of(&args(&["EVAL", "return 1", "3", "x"])), None);
        assert_eq!(keys_of(&args(&["PING"])), None);
        assert_eq!(keys_of(&args(&["FLUSHALL"])), None);
    }

    #[test]
    fn any_argument_count_is_safe() {
        // Every command of the table (and an unknown one) with 1 to 9 arguments: key positions
        // stay in range, and redirect/answer never panic.
        let topology = three_workers(0);
        let names = prefixkv_commands::commands::table::COMMANDS
            .iter()
            .map(|s| s.name)
            .chain(["nope", "CLUSTER"]);
        for name in names {
            for count in 0..9 {
                let mut words = vec![name];
                words.extend(std::iter::repeat_n("k", count));
                let args = args(&words);
                let _ = keys_of(&args);
                let _ = topology.redirect(&args);
                let _ = topology.answer(&args, || 0);
            }
        }
        assert_eq!(topology.redirect(&[]), None);
        assert_eq!(topology.answer(&[], || 0), None);
    }

    #[test]
    fn foreign_keys_are_moved_and_spanning_keys_refused() {
        // "foo" is slot 12182: worker 2's (10922..=16383).
        let worker0 = three_workers(0);
        assert_eq!(
            text(worker0.redirect(&args(&["GET", "foo"]))),
            "-MOVED 12182 127.0.0.1:7002\r\n"
        );
        assert_eq!(three_workers(2).redirect(&args(&["GET", "foo"])), None);
        // Same hash tag: one slot, so allowed (and routed by the tag).
        assert_eq!(
            three_workers(2).redirect(&args(&["MSET", "{foo}a", "1", "{foo}b", "2"])),
            None
        );
        assert_eq!(
            text(three_workers(2).redirect(&args(&["MGET", "foo", "bar"]))),
            "-CROSSSLOT Keys in request don't hash to the same slot\r\n"
        );
        assert_eq!(worker0.redirect(&args(&["PING"])), None);
        // No table published: the worker owns everything.
        let alone = Topology::from_ranges(Vec::new(), 4, "127.0.0.1:9").unwrap();
        assert_eq!(alone.redirect(&args(&["GET", "foo"])), None);
        let bad = vec![PartitionRange {
            first: 0,
            last: 16384,
            worker: 0,
            address: "a:1".into(),
        }];
        assert!(Topology::from_ranges(bad, 0, "a:1").is_err());
    }

    #[test]
    fn frozen_slots_answer_tryagain() {
        let worker2 = three_workers(2).with_frozen(&[(12000, 12200), (0, 10)]);
        assert_eq!(
            worker2.frozen(),
            &[(12000, 12200)],
            "slots it does not own are dropped"
        );
        assert_eq!(
            text(worker2.redirect(&args(&["GET", "foo"]))),
            "-TRYAGAIN Hash slot 12182 is being migrated; retry later\r\n"
        );
        // Other slots of the same worker still run; foreign ones still move.
        assert_eq!(worker2.redirect(&args(&["GET", "somekey"])), None);
        assert!(text(worker2.redirect(&args(&["GET", "{user1000}.a"]))).starts_with("-MOVED 3443"));
        assert!(worker2.owns_all(10922, 16383) && !worker2.owns_all(10921, 10922));
        assert_eq!(
            worker2.with_frozen(&[]).redirect(&args(&["GET", "foo"])),
            None
        );
    }

    #[test]
    fn topology_replies_have_redis_shapes() {
        let topology = three_workers(1);
        let slots = text(topology.answer(&args(&["cluster", "slots"]), || 0));
        assert!(slots.starts_with(
            "*3\r\n*3\r\n:0\r\n:5460\r\n*3\r\n$9\r\n127.0.0.1\r\n:7000\r\n$40\r\n0000"
        ));
        assert!(slots.contains(":10922\r\n:16383\r\n*3\r\n$9\r\n127.0.0.1\r\n:7002\r\n"));
        assert_eq!(
            text(topology.answer(&args(&["CLUSTER", "KEYSLOT", "foo"]), || 0)),
            ":12182\r\n"
        );
        assert_eq!(
            text(topology.answer(&args(&["CLUSTER", "MYID"]), || 0)),
            format!("$40\r\n{}\r\n", node_id(1))
        );
        let info = text(topology.answer(&args(&["CLUSTER", "INFO"]), || 3));
        assert!(info.contains("cluster_state:ok\r\ncluster_slots_assigned:16384\r\n"));
        assert!(info.contains("cluster_known_nodes:3\r\n"));
        assert!(info.contains("cluster_current_epoch:3\r\n"));
        let shards = text(topology.answer(&args(&["CLUSTER", "SHARDS"]), || 0));
        assert!(shards.starts_with("*3\r\n*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:5460\r\n$5\r\nnodes"));
        let nodes = text(topology.answer(&args(&["CLUSTER", "NODES"]), || 0));
        assert!(nodes.contains("127.0.0.1:7001@17001 myself,master - 0 0 0 connected 5461-10921"));
        assert!(text(topology.answer(&args(&["CLUSTER", "RESET"]), || 0)).starts_with("-ERR"));
        assert_eq!(text(topology.answer(&args(&["READONLY"]), || 0)), "+OK\r\n");
        assert_eq!(topology.answer(&args(&["GET", "k"]), || 0), None);
    }
}
