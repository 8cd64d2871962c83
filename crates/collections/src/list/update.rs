//! Updates of a [`List`]: planning the writes of a reshaped, emptied or merged chunk, and
//! applying them in the order the module docs of `list` argue for, undoing them on failure.

use super::chunk::{entries_bytes, Chunk, CHUNK_HEAD_BYTES};
use super::{List, Spot};
use crate::{Error, Records, Result};

/// One write of an update, with what undoing it needs.
pub(super) enum Write {
    /// Puts `chunk` at `id`; `old` is the record it overwrites (`None`: a fresh id).
    Put {
        id: u64,
        chunk: Chunk,
        old: Option<Vec<u8>>,
    },
    /// Deletes chunk `id`, whose record was `old`.
    Delete { id: u64, old: Vec<u8> },
}

impl Write {
    /// Where the write goes in an update (see the module docs): puts that grow a record (or
    /// create one) first, as only they can fail for size; then same-size relinks, then shrinking
    /// rewrites, then deletes. So a refused write is undone by writes no larger than writes that
    /// already succeeded.
    fn order(&self) -> u8 {
        match self {
            Write::Put { old: None, .. } => 0,
            Write::Put {
                chunk,
                old: Some(old),
                ..
            } => match chunk.encoded_len().cmp(&old.len()) {
                std::cmp::Ordering::Greater => 0,
                std::cmp::Ordering::Equal => 1,
                std::cmp::Ordering::Less => 2,
            },
            Write::Delete { .. } => 3,
        }
    }
}

impl List {
    /// Cuts `entries` into pieces that each fit the limits (or hold one entry): halves by bytes
    /// while over the byte budget, else by count.
    pub(super) fn split(&self, mut entries: Vec<Vec<u8>>) -> Vec<Vec<Vec<u8>>> {
        if self.limits.fits(&entries) {
            return vec![entries];
        }
        let cut = if CHUNK_HEAD_BYTES + entries_bytes(&entries) > self.limits.max_bytes {
            let half = entries_bytes(&entries) / 2;
            let mut sum = 0;
            let first_half = entries
                .iter()
                .take_while(|entry| {
                    sum += 4 + entry.len();
                    sum < half
                })
                .count();
            (first_half + 1).clamp(1, entries.len() - 1)
        } else {
            entries.len() / 2
        };
        let right = entries.split_off(cut);
        let mut pieces = self.split(entries);
        pieces.extend(self.split(right));
        pieces
    }

    /// The writes replacing chunk `spot` by `pieces` in its place in the chain: `pieces[keep]`
    /// keeps the chunk's id, the others get fresh ids, the neighbours' links follow. Updates
    /// `next` (the header after the update).
    pub(super) fn reshape(
        &self,
        records: &mut impl Records,
        spot: Spot,
        pieces: Vec<Vec<Vec<u8>>>,
        keep: usize,
        next: &mut List,
    ) -> Result<Vec<Write>> {
        debug_assert!(pieces.len() >= 2 && keep < pieces.len());
        debug_assert!(pieces.iter().all(|piece| !piece.is_empty()));
        let ids: Vec<u64> = (0..pieces.len())
            .map(|at| {
                if at == keep {
                    return spot.id;
                }
                next.next_chunk += 1;
                next.next_chunk - 1
            })
            .collect();
        let last = pieces.len() - 1;
        let (before, after) = (spot.chunk.prev, spot.chunk.next);
        let mut writes = Vec::with_capacity(pieces.len() + 2);
        let mut kept = None;
        for (at, entries) in pieces.into_iter().enumerate() {
            let chunk = Chunk {
                prev: if at == 0 { before } else { ids[at - 1] },
                next: if at == last { after } else { ids[at + 1] },
                entries,
            };
            if at == keep {
                kept = Some(chunk);
            } else {
                writes.push(Write::Put {
                    id: ids[at],
                    chunk,
                    old: None,
                });
            }
        }
        writes.push(Write::Put {
            id: spot.id,
            chunk: kept.expect("keep is one of the pieces"),
            old: Some(spot.raw),
        });
        if keep != 0 && before != 0 {
            writes.push(self.relink(records, before, false, spot.id, ids[0])?);
        }
        if keep != last && after != 0 {
            writes.push(self.relink(records, after, true, spot.id, ids[last])?);
        }
        if spot.id == self.head {
            next.head = ids[0];
        }
        if spot.id == self.tail {
            next.tail = ids[last];
        }
        next.chunks += last as u64;
        Ok(writes)
    }

    /// The write pointing chunk `id`'s `prev` (or `next`) link, which must be `from`, to `to`.
    fn relink(
        &self,
        records: &mut impl Records,
        id: u64,
        prev: bool,
        from: u64,
        to: u64,
    ) -> Result<Write> {
        let (mut chunk, raw) = self.read(records, id)?;
        let link = if prev {
            &mut chunk.prev
        } else {
            &mut chunk.next
        };
        if *link != from {
            return Err(self.damaged(id, "links disagree with its neighbour's"));
        }
        *link = to;
        Ok(Write::Put {
            id,
            chunk,
            old: Some(raw),
        })
    }

    /// The writes taking the emptied chunk `spot` out of the chain: its neighbours' links, then
    /// its delete. Updates `next`.
    pub(super) fn unlink(
        &self,
        records: &mut impl Records,
        spot: Spot,
        next: &mut List,
    ) -> Result<Vec<Write>> {
        let (before, after) = (spot.chunk.prev, spot.chunk.next);
        let mut writes = Vec::with_capacity(3);
        if before != 0 {
            writes.push(self.relink(records, before, false, spot.id, after)?);
        }
        if after != 0 {
            writes.push(self.relink(records, after, true, spot.id, before)?);
        }
        writes.push(Write::Delete {
            id: spot.id,
            old: spot.raw,
        });
        if spot.id == self.head {
            next.head = after;
        }
        if spot.id == self.tail {
            next.tail = before;
        }
        next.chunks -= 1;
        if (next.chunks == 0) != (next.len == 0) {
            return Err(self.damaged(spot.id, "the counts do not add up to len"));
        }
        Ok(writes)
    }

    /// The writes merging the (small, non-empty) chunk `spot` with its next neighbour, else its
    /// previous one, when the two fit in one chunk, and the header after them; `None` when
    /// neither fits. The left chunk keeps its id and takes the right one's entries.
    pub(super) fn merge_plan(
        &self,
        records: &mut impl Records,
        spot: &Spot,
        mut next: List,
    ) -> Result<Option<(Vec<Write>, List)>> {
        let here = (spot.id, spot.chunk.clone(), spot.raw.clone());
        let mut pair = None;
        for (id, is_next) in [(spot.chunk.next, true), (spot.chunk.prev, false)] {
            if id == 0 {
                continue;
            }
            let (chunk, raw) = self.read(records, id)?;
            let back = if is_next { chunk.prev } else { chunk.next };
            if back != spot.id {
                return Err(self.damaged(id, "links disagree with its neighbour's"));
            }
            let mut union = Vec::with_capacity(chunk.entries.len() + spot.chunk.entries.len());
            union.extend_from_slice(if is_next {
                &here.1.entries
            } else {
                &chunk.entries
            });
            union.extend_from_slice(if is_next {
                &chunk.entries
            } else {
                &here.1.entries
            });
            if self.limits.fits(&union) {
                let there = (id, chunk, raw);
                pair = Some(match is_next {
                    true => (here, there, union),
                    false => (there, here, union),
                });
                break;
            }
        }
        let Some(((left, left_chunk, left_raw), (right, right_chunk, right_raw), entries)) = pair
        else {
            return Ok(None);
        };
        let mut writes = vec![Write::Put {
            id: left,
            chunk: Chunk {
                prev: left_chunk.prev,
                next: right_chunk.next,
                entries,
            },
            old: Some(left_raw),
        }];
        if right_chunk.next != 0 {
            writes.push(self.relink(records, right_chunk.next, true, right, left)?);
        }
        writes.push(Write::Delete {
            id: right,
            old: right_raw,
        });
        if right == self.tail {
            next.tail = left;
        }
        next.chunks -= 1;
        Ok(Some((writes, next)))
    }

    /// Performs `writes` in order. When one fails, undoes those before it in reverse (best
    /// effort: the store refuses undo writes only when it refuses every write) and returns the
    /// failed step and its error.
    pub(super) fn apply(
        &self,
        records: &mut impl Records,
        mut writes: Vec<Write>,
    ) -> std::result::Result<(), (usize, Error)> {
        writes.sort_by_key(Write::order);
        let mut buf = Vec::new();
        for (step, write) in writes.iter().enumerate() {
            let result = match write {
                Write::Put { id, chunk, .. } => {
                    buf.clear();
                    chunk.encode(&mut buf);
                    // A new or rewritten chunk: pushes may fill it (`List::push_in_place`).
                    let capacity = crate::capacity_hint(buf.len(), self.limits.max_bytes);
                    records.put_with_capacity(&self.key(*id), &buf, capacity)
                }
                Write::Delete { id, .. } => records.delete(&self.key(*id)),
            };
            if let Err(error) = result {
                for done in writes[..step].iter().rev() {
                    // Errors ignored: nothing more can be done (see the module docs).
                    let _ = match done {
                        Write::Put { id, old: None, .. } => records.delete(&self.key(*id)),
                        Write::Put {
                            id, old: Some(old), ..
                        }
                        | Write::Delete { id, old } => records.put(&self.key(*id), old),
                    };
                }
                return Err((step, error));
            }
        }
        Ok(())
    }

    /// Performs `writes`, then takes `next` as the header; on error `self` is unchanged.
    pub(super) fn commit(
        &mut self,
        records: &mut impl Records,
        writes: Vec<Write>,
        next: List,
    ) -> Result<()> {
        self.check_next(&next)?;
        self.apply(records, writes).map_err(|(_, error)| error)?;
        *self = next;
        Ok(())
    }

    /// Checks, before anything is written, that an update leads to a consistent header. From
    /// intact records it always does; a header whose counts disagree with the chunks (damage
    /// the walk did not reach) can lead elsewhere.
    pub(super) fn check_next(&self, next: &List) -> Result<()> {
        match next.consistent() {
            true => Ok(()),
            false => Err(Error::Corrupt(format!(
                "list {}: counts disagree with the chunks (header {self:?})",
                self.id
            ))),
        }
    }
}
