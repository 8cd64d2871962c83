//! Pub/Sub: channels and patterns, as Redis has them. Messages are not stored: PUBLISH hands a
//! message to the clients subscribed at that moment and to no one else, and nothing of it is
//! checkpointed or logged.
//!
//! Invariants:
//! - Each subscribed connection has one [`Subscriber`] (its queue of undelivered messages) in the
//!   registry once per channel and once per pattern it subscribed to, and nowhere else; a
//!   connection removes all of its entries when it unsubscribes, resets or closes.
//! - A subscriber's queue holds at most `limit_bytes` of message bytes (the connection's
//!   `client-output-buffer-limit`, read at subscription): a publisher that would pass it marks
//!   the subscriber overflowed and drops the message, and the connection then closes, as Redis
//!   closes a slow Pub/Sub client. So a slow subscriber never grows server memory without bound.
//! - Messages from one publisher to one subscriber arrive in the order they were published (one
//!   FIFO queue per subscriber, filled under the registry lock).

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::mpsc;

use crate::error::CommandError;
use crate::glob;

/// One message on its way to a subscriber.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The pattern that matched (`pmessage`), or `None` for a channel subscription (`message`).
    pub pattern: Option<Bytes>,
    /// The channel it was published to.
    pub channel: Bytes,
    /// The payload.
    pub payload: Bytes,
}

impl Message {
    fn bytes(&self) -> u64 {
        (self.pattern.as_ref().map_or(0, Bytes::len) + self.channel.len() + self.payload.len())
            as u64
    }
}

/// A subscribed connection's queue, shared with the registry.
pub struct Subscriber {
    sender: mpsc::UnboundedSender<Message>,
    queued_bytes: AtomicU64,
    limit_bytes: u64,
    overflowed: AtomicBool,
    /// Signalled on overflow, so a connection blocked writing to a client that does not read
    /// stops waiting and closes.
    overflow: tokio::sync::Notify,
}

impl Subscriber {
    /// Queues `message` unless that passes the limit (then marks the subscriber overflowed).
    /// Whether it was queued.
    fn offer(&self, message: Message) -> bool {
        let bytes = message.bytes();
        let queued = self.queued_bytes.fetch_add(bytes, Ordering::SeqCst) + bytes;
        if queued > self.limit_bytes || self.overflowed.load(Ordering::SeqCst) {
            self.queued_bytes.fetch_sub(bytes, Ordering::SeqCst);
            self.overflowed.store(true, Ordering::SeqCst);
            self.overflow.notify_one();
            return false;
        }
        // A closed receiver means the connection is going away; it counts as not delivered.
        self.sender.send(message).is_ok()
    }
}

/// Who is subscribed to what.
#[derive(Default)]
pub struct PubSub {
    channels: Mutex<HashMap<Bytes, Vec<Arc<Subscriber>>>>,
    patterns: Mutex<Vec<(Bytes, Arc<Subscriber>)>>,
}

impl PubSub {
    /// Delivers `payload` to every subscriber of `channel` and of a pattern matching it; returns
    /// how many received it (a subscriber counts once per matching subscription, as in Redis).
    pub fn publish(&self, channel: &Bytes, payload: &Bytes) -> u64 {
        let mut received = 0;
        if let Some(subscribers) = self.channels.lock().get(channel) {
            for subscriber in subscribers {
                let message = Message {
                    pattern: None,
                    channel: channel.clone(),
                    payload: payload.clone(),
                };
                received += u64::from(subscriber.offer(message));
            }
        }
        for (pattern, subscriber) in self.patterns.lock().iter() {
            if glob::matches(pattern, channel, false) {
                let message = Message {
                    pattern: Some(pattern.clone()),
                    channel: channel.clone(),
                    payload: payload.clone(),
                };
                received += u64::from(subscriber.offer(message));
            }
        }
        received
    }

    /// Channels with at least one subscriber, matching `pattern` if given (PUBSUB CHANNELS).
    pub fn channels(&self, pattern: Option<&[u8]>) -> Vec<Bytes> {
        let mut names: Vec<Bytes> = self
            .channels
            .lock()
            .keys()
            .filter(|name| pattern.is_none_or(|p| glob::matches(p, name, false)))
            .cloned()
            .collect();
        names.sort();
        names
    }

    /// Subscribers of `channel` (PUBSUB NUMSUB; patterns not counted, as in Redis).
    pub fn subscribers(&self, channel: &[u8]) -> usize {
        self.channels.lock().get(channel).map_or(0, Vec::len)
    }

    /// Pattern subscriptions over all clients (PUBSUB NUMPAT).
    pub fn pattern_count(&self) -> usize {
        self.patterns.lock().len()
    }

    fn add_channel(&self, channel: Bytes, subscriber: &Arc<Subscriber>) {
        self.channels
            .lock()
            .entry(channel)
            .or_default()
            .push(subscriber.clone());
    }

    fn remove_channel(&self, channel: &Bytes, subscriber: &Arc<Subscriber>) {
        let mut channels = self.channels.lock();
        if let Some(subscribers) = channels.get_mut(channel) {
            subscribers.retain(|s| !Arc::ptr_eq(s, subscriber));
            if subscribers.is_empty() {
                channels.remove(channel);
            }
        }
    }

    fn add_pattern(&self, pattern: Bytes, subscriber: &Arc<Subscriber>) {
        self.patterns.lock().push((pattern, subscriber.clone()));
    }

    fn remove_pattern(&self, pattern: &Bytes, subscriber: &Arc<Subscriber>) {
        self.patterns
            .lock()
            .retain(|(p, s)| !(p == pattern && Arc::ptr_eq(s, subscriber)));
    }
}

/// Which of (channel, pattern) a subscription names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// SUBSCRIBE / UNSUBSCRIBE.
    Channel,
    /// PSUBSCRIBE / PUNSUBSCRIBE.
    Pattern,
}

/// One connection's subscriptions and its queue's receiving end.
pub struct ClientSubscriptions {
    subscriber: Arc<Subscriber>,
    receiver: mpsc::UnboundedReceiver<Message>,
    channels: BTreeSet<Bytes>,
    patterns: BTreeSet<Bytes>,
    /// Bytes of channel and pattern names held, bounded by the caller's limit.
    name_bytes: u64,
}

impl ClientSubscriptions {
    /// A connection's state before its first subscription; its queue holds at most
    /// `limit_bytes` of undelivered messages.
    pub fn new(limit_bytes: u64) -> ClientSubscriptions {
        let (sender, receiver) = mpsc::unbounded_channel();
        ClientSubscriptions {
            subscriber: Arc::new(Subscriber {
                sender,
                queued_bytes: AtomicU64::new(0),
                limit_bytes,
                overflowed: AtomicBool::new(false),
                overflow: tokio::sync::Notify::new(),
            }),
            receiver,
            channels: BTreeSet::new(),
            patterns: BTreeSet::new(),
            name_bytes: 0,
        }
    }

    /// Subscriptions held (channels + patterns): the count Redis replies with.
    pub fn count(&self) -> usize {
        self.channels.len() + self.patterns.len()
    }

    /// Subscribes to `name` unless already subscribed or over `limit_bytes` of names; returns
    /// the count after it, or the error to answer.
    pub fn subscribe(
        &mut self,
        registry: &PubSub,
        kind: Kind,
        name: Bytes,
        limit_bytes: u64,
    ) -> Result<usize, CommandError> {
        let set = match kind {
            Kind::Channel => &mut self.channels,
            Kind::Pattern => &mut self.patterns,
        };
        if !set.contains(&name) {
            let bytes = name.len() as u64 + 1;
            if self.name_bytes + bytes > limit_bytes {
                return Err(CommandError::err(format!(
                    "too many subscriptions: their names would exceed \
                     client-query-buffer-limit ({limit_bytes} bytes)"
                )));
            }
            self.name_bytes += bytes;
            set.insert(name.clone());
            match kind {
                Kind::Channel => registry.add_channel(name, &self.subscriber),
                Kind::Pattern => registry.add_pattern(name, &self.subscriber),
            }
        }
        Ok(self.count())
    }

    /// Unsubscribes from `name` (whether or not it was subscribed); returns the count after it.
    pub fn unsubscribe(&mut self, registry: &PubSub, kind: Kind, name: &Bytes) -> usize {
        let removed = match kind {
            Kind::Channel => self.channels.remove(name),
            Kind::Pattern => self.patterns.remove(name),
        };
        if removed {
            self.name_bytes -= name.len() as u64 + 1;
            match kind {
                Kind::Channel => registry.remove_channel(name, &self.subscriber),
                Kind::Pattern => registry.remove_pattern(name, &self.subscriber),
            }
        }
        self.count()
    }

    /// The names subscribed to of `kind`, sorted.
    pub fn names(&self, kind: Kind) -> Vec<Bytes> {
        match kind {
            Kind::Channel => self.channels.iter().cloned().collect(),
            Kind::Pattern => self.patterns.iter().cloned().collect(),
        }
    }

    /// Removes every subscription (RESET, or the connection closing).
    pub fn unsubscribe_all(&mut self, registry: &PubSub) {
        for kind in [Kind::Channel, Kind::Pattern] {
            for name in self.names(kind) {
                self.unsubscribe(registry, kind, &name);
            }
        }
    }

    /// Whether a publisher dropped a message for this connection (its queue was full): the
    /// connection must close.
    pub fn overflowed(&self) -> bool {
        self.subscriber.overflowed.load(Ordering::SeqCst)
    }

    /// Returns once the queue has overflowed (at once if it already has).
    pub async fn overflow_notified(&self) {
        if self.overflowed() {
            return;
        }
        self.subscriber.overflow.notified().await;
    }

    /// Waits for the next message (cancel safe: a message is taken only when returned).
    pub async fn next(&mut self) -> Option<Message> {
        let message = self.receiver.recv().await?;
        self.subscriber
            .queued_bytes
            .fetch_sub(message.bytes(), Ordering::SeqCst);
        Some(message)
    }

    /// Whether a message is waiting (one may arrive after the last unsubscribe).
    pub fn has_queued(&self) -> bool {
        !self.receiver.is_empty()
    }

    /// The next message if one is queued now.
    pub fn try_next(&mut self) -> Option<Message> {
        let message = self.receiver.try_recv().ok()?;
        self.subscriber
            .queued_bytes
            .fetch_sub(message.bytes(), Ordering::SeqCst);
        Some(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(text: &str) -> Bytes {
        Bytes::copy_from_slice(text.as_bytes())
    }

    #[test]
    fn publish_reaches_channel_and_pattern_subscribers_in_order() {
        let registry = PubSub::default();
        let mut a = ClientSubscriptions::new(1 << 20);
        let mut c = ClientSubscriptions::new(1 << 20);
        assert_eq!(
            a.subscribe(&registry, Kind::Channel, b("news"), 1 << 20),
            Ok(1)
        );
        assert_eq!(
            a.subscribe(&registry, Kind::Channel, b("news"), 1 << 20),
            Ok(1)
        );
        assert_eq!(
            a.subscribe(&registry, Kind::Pattern, b("n*"), 1 << 20),
            Ok(2)
        );
        assert_eq!(
            c.subscribe(&registry, Kind::Pattern, b("x*"), 1 << 20),
            Ok(1)
        );
        assert_eq!(registry.publish(&b("news"), &b("1")), 2);
        assert_eq!(registry.publish(&b("news"), &b("2")), 2);
        assert_eq!(registry.publish(&b("other"), &b("3")), 0);
        let got: Vec<Message> = std::iter::from_fn(|| a.try_next()).collect();
        let payloads: Vec<(Option<Bytes>, Bytes)> = got
            .iter()
            .map(|m| (m.pattern.clone(), m.payload.clone()))
            .collect();
        assert_eq!(
            payloads,
            vec![
                (None, b("1")),
                (Some(b("n*")), b("1")),
                (None, b("2")),
                (Some(b("n*")), b("2"))
            ]
        );
        assert!(c.try_next().is_none());
        assert_eq!(registry.channels(None), vec![b("news")]);
        assert_eq!(registry.subscribers(b"news"), 1);
        assert_eq!(registry.pattern_count(), 2);
        a.unsubscribe_all(&registry);
        c.unsubscribe_all(&registry);
        assert_eq!(registry.publish(&b("news"), &b("4")), 0);
        assert!(registry.channels(None).is_empty());
        assert_eq!(registry.pattern_count(), 0);
    }

    /// A connection blocked writing to a client that does not read waits on this: it must wake
    /// when a publisher overflows the queue, not only when the connection looks again.
    #[tokio::test(flavor = "current_thread")]
    async fn an_overflow_wakes_a_waiting_connection() {
        let registry = Arc::new(PubSub::default());
        let mut slow = ClientSubscriptions::new(4);
        slow.subscribe(&registry, Kind::Channel, b("ch"), 1 << 20)
            .unwrap();
        let publisher = {
            let registry = registry.clone();
            tokio::spawn(async move {
                tokio::task::yield_now().await;
                registry.publish(&b("ch"), &b("too long"))
            })
        };
        let woke =
            tokio::time::timeout(std::time::Duration::from_secs(10), slow.overflow_notified())
                .await;
        assert!(
            woke.is_ok(),
            "the overflow did not wake the waiting connection"
        );
        assert_eq!(publisher.await.unwrap(), 0);
    }

    #[test]
    fn a_full_queue_drops_the_message_and_marks_the_subscriber() {
        let registry = PubSub::default();
        let mut slow = ClientSubscriptions::new(10);
        slow.subscribe(&registry, Kind::Channel, b("ch"), 1 << 20)
            .unwrap();
        assert_eq!(registry.publish(&b("ch"), &b("1234")), 1); // 6 bytes queued
        assert!(!slow.overflowed());
        assert_eq!(registry.publish(&b("ch"), &b("5678")), 0); // 12 > 10: dropped
        assert!(slow.overflowed());
        assert_eq!(slow.try_next().unwrap().payload, b("1234"));
        assert!(slow.try_next().is_none());
        let error = slow
            .subscribe(&registry, Kind::Channel, b("a-long-name"), 8)
            .unwrap_err();
        assert!(
            error.to_string().contains("too many subscriptions"),
            "{error}"
        );
    }
}
